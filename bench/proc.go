package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is a child process whose stdout lines are read on a channel.
type proc struct {
	name  string
	cmd   *exec.Cmd
	lines chan string
	done  chan struct{}
	err   error
	log   *os.File // stderr
}

var (
	procsMu sync.Mutex
	procs   = map[*proc]bool{}
)

// startProc starts argv, pinned to core when core >= 0 and taskset exists.
// Its stderr goes to a log file in logDir.
func startProc(name string, core int, logDir string, dir string, argv ...string) (*proc, error) {
	if core >= 0 {
		if ts, err := exec.LookPath("taskset"); err == nil {
			argv = append([]string{ts, "-c", strconv.Itoa(core)}, argv...)
		}
	}
	log, err := os.Create(fmt.Sprintf("%s/%s.log", logDir, name))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Stderr = log
	// Its own process group, so that stopping it reaches what it runs; and a
	// signal if the harness dies first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	out, err := cmd.StdoutPipe()
	if err != nil {
		log.Close()
		return nil, err
	}
	p := &proc{name: name, cmd: cmd, lines: make(chan string, 64), done: make(chan struct{}), log: log}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	procsMu.Lock()
	procs[p] = true
	procsMu.Unlock()
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		_, _ = io.Copy(io.Discard, out)
		close(p.lines)
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// waitLine returns the first stdout line with prefix, or an error when the
// process ends or the timeout passes first.
func (p *proc) waitLine(prefix string, timeout time.Duration) (string, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				<-p.done
				return "", fmt.Errorf("%s exited before %q: %v; %s", p.name, prefix, p.err, p.tail())
			}
			if strings.HasPrefix(l, prefix) {
				return strings.TrimSpace(strings.TrimPrefix(l, prefix)), nil
			}
		case <-t.C:
			return "", fmt.Errorf("%s: no %q within %s; %s", p.name, prefix, timeout, p.tail())
		}
	}
}

// tail is the end of the process's stderr, for error messages.
func (p *proc) tail() string {
	b, err := os.ReadFile(p.log.Name())
	if err != nil {
		return ""
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return "stderr: " + strings.TrimSpace(string(b))
}

// stop ends the process: SIGTERM to its group, then SIGKILL after grace.
func (p *proc) stop(grace time.Duration) {
	select {
	case <-p.done:
	default:
		_ = syscall.Kill(-p.pid(), syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(grace):
			_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
			<-p.done
		}
	}
	p.log.Close()
	procsMu.Lock()
	delete(procs, p)
	procsMu.Unlock()
}

// stopAll stops every process still running.
func stopAll() {
	procsMu.Lock()
	ps := make([]*proc, 0, len(procs))
	for p := range procs {
		ps = append(ps, p)
	}
	procsMu.Unlock()
	for _, p := range ps {
		p.stop(10 * time.Second)
	}
}

// cpuSeconds is the user+system CPU time of pid, all threads.
func cpuSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("bad /proc stat")
	}
	f := strings.Fields(s[i+1:])
	// After the command: state is field 3; utime and stime are 14 and 15.
	if len(f) < 13 {
		return 0, errors.New("short /proc stat")
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / clockTicks(), nil
}

var clkTck float64

func clockTicks() float64 {
	if clkTck == 0 {
		clkTck = 100
		if out, err := exec.Command("getconf", "CLK_TCK").Output(); err == nil {
			if v, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64); err == nil && v > 0 {
				clkTck = v
			}
		}
	}
	return clkTck
}

// statusKiB reads a "Key:   N kB" line of /proc/<pid>/status ("self" too).
func statusKiB(pid, key string) (int64, error) {
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, key+":"); ok {
			return strconv.ParseInt(strings.Fields(v)[0], 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s in status", key)
}

package codemode

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Schedule is a parsed five-field cron schedule, in UTC: minute (0-59),
// hour (0-23), day of month (1-31), month (1-12), day of week (0-6, 0 is
// Sunday; 7 is Sunday too). Each field is "*", a number, a range "a-b",
// a list "a,b,c" and any of these with a step "/n". As in cron, when both
// day fields are restricted a day matches either.
type Schedule struct {
	minute, hour, dom, month, dow uint64 // bit i set: value i matches
	domStar, dowStar              bool
}

var fields = [...]struct {
	name     string
	min, max int
}{{"minute", 0, 59}, {"hour", 0, 23}, {"day of month", 1, 31}, {"month", 1, 12}, {"day of week", 0, 7}}

// ParseSchedule parses a cron schedule. A schedule that runs more often
// than every five minutes is refused: package jobs are for periodic work.
func ParseSchedule(spec string) (Schedule, error) {
	parts := strings.Fields(spec)
	if len(parts) != 5 {
		return Schedule{}, fmt.Errorf("schedule %q: want five fields (minute hour day-of-month month day-of-week), e.g. \"0 7 * * 1-5\"", spec)
	}
	var bits [5]uint64
	for i, p := range parts {
		b, err := parseField(p, fields[i].min, fields[i].max)
		if err != nil {
			return Schedule{}, fmt.Errorf("schedule %q: %s field %q: %v", spec, fields[i].name, p, err)
		}
		bits[i] = b
	}
	if bits[4]&(1<<7) != 0 {
		bits[4] |= 1 // 7 is Sunday
	}
	s := Schedule{minute: bits[0], hour: bits[1], dom: bits[2], month: bits[3], dow: bits[4],
		domStar: parts[2] == "*" || strings.HasPrefix(parts[2], "*/"), dowStar: parts[4] == "*" || strings.HasPrefix(parts[4], "*/")}
	if gap := s.minGap(); gap < 5 {
		return Schedule{}, fmt.Errorf("schedule %q runs every %d minutes: package jobs run at most every five minutes", spec, gap)
	}
	return s, nil
}

func parseField(f string, min, max int) (uint64, error) {
	var bits uint64
	for _, part := range strings.Split(f, ",") {
		rng, step := part, 1
		if i := strings.IndexByte(part, '/'); i >= 0 {
			n, err := strconv.Atoi(part[i+1:])
			if err != nil || n < 1 {
				return 0, fmt.Errorf("step %q is not a positive number", part[i+1:])
			}
			rng, step = part[:i], n
		}
		lo, hi := min, max
		switch {
		case rng == "*":
		case strings.Contains(rng, "-"):
			a, b, _ := strings.Cut(rng, "-")
			var err1, err2 error
			lo, err1 = strconv.Atoi(a)
			hi, err2 = strconv.Atoi(b)
			if err1 != nil || err2 != nil || lo > hi {
				return 0, fmt.Errorf("range %q is not a-b with a ≤ b", rng)
			}
		default:
			n, err := strconv.Atoi(rng)
			if err != nil {
				return 0, fmt.Errorf("%q is not a number", rng)
			}
			lo, hi = n, n
			if step > 1 {
				hi = max
			}
		}
		if lo < min || hi > max {
			return 0, fmt.Errorf("values must be between %d and %d", min, max)
		}
		for v := lo; v <= hi; v += step {
			bits |= 1 << uint(v)
		}
	}
	return bits, nil
}

// minGap is the smallest number of minutes between two runs within a day
// (an approximation good enough to refuse schedules that run too often).
func (s Schedule) minGap() int {
	var mins []int
	for m := 0; m < 60; m++ {
		if s.minute&(1<<uint(m)) != 0 {
			mins = append(mins, m)
		}
	}
	if len(mins) == 0 {
		return 60
	}
	gap := 60 - mins[len(mins)-1] + mins[0] // across the hour, if consecutive hours match
	if s.hour&(s.hour>>1) == 0 && !(s.hour&1 != 0 && s.hour&(1<<23) != 0) {
		gap = 60
	}
	for i := 1; i < len(mins); i++ {
		gap = min(gap, mins[i]-mins[i-1])
	}
	return gap
}

func (s Schedule) matchDay(t time.Time) bool {
	dom := s.dom&(1<<uint(t.Day())) != 0
	dow := s.dow&(1<<uint(t.Weekday())) != 0
	switch {
	case s.domStar && s.dowStar:
		return true
	case s.domStar:
		return dow
	case s.dowStar:
		return dom
	default:
		return dom || dow
	}
}

// Next returns the first minute strictly after t at which the schedule
// runs (UTC). A schedule that never runs (31 February) returns the zero
// time after searching five years.
func (s Schedule) Next(t time.Time) time.Time {
	t = t.UTC().Truncate(time.Minute).Add(time.Minute)
	end := t.AddDate(5, 0, 0)
	for t.Before(end) {
		if s.month&(1<<uint(t.Month())) == 0 {
			t = time.Date(t.Year(), t.Month()+1, 1, 0, 0, 0, 0, time.UTC)
			continue
		}
		if !s.matchDay(t) {
			t = time.Date(t.Year(), t.Month(), t.Day()+1, 0, 0, 0, 0, time.UTC)
			continue
		}
		if s.hour&(1<<uint(t.Hour())) == 0 {
			t = time.Date(t.Year(), t.Month(), t.Day(), t.Hour()+1, 0, 0, 0, time.UTC)
			continue
		}
		if s.minute&(1<<uint(t.Minute())) == 0 {
			t = t.Add(time.Minute)
			continue
		}
		return t
	}
	return time.Time{}
}

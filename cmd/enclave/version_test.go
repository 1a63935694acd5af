package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

const versionPkg = "github.com/enclave-mcp/enclave/internal/version"

// buildEnclave builds this command as the release script does (static,
// trimmed paths) with extra go build arguments, and returns the binary.
func buildEnclave(t *testing.T, args ...string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "enclave")
	cmd := exec.Command("go", append(append([]string{"build", "-trimpath", "-o", bin}, args...), ".")...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %v: %v\n%s", args, err, out)
	}
	return bin
}

// runEnclave runs bin with args in an empty data directory and returns its
// exit status and output.
func runEnclave(t *testing.T, bin string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"HOME=" + t.TempDir(), "ENCLAVE_DATA_DIR=" + t.TempDir()}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("run %v: %v", args, err)
		}
		code = ee.ExitCode()
	}
	return code, out.String(), errb.String()
}

// A release build's version and commit come from -ldflags -X; "version",
// "--version" and "-version" print them with the Go release and the
// platform. The default build links no cloud driver and says so.
func TestVersionSetAtLinkTime(t *testing.T) {
	bin := buildEnclave(t, "-ldflags", "-s -w -X "+versionPkg+".version=v9.8.7-test -X "+versionPkg+".commit=feedface0123")
	for _, arg := range []string{"version", "--version", "-version"} {
		code, out, errOut := runEnclave(t, bin, arg)
		if code != 0 {
			t.Fatalf("enclave %s: exit %d, stderr %q", arg, code, errOut)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if lines[0] != "enclave v9.8.7-test" {
			t.Errorf("enclave %s: first line %q", arg, lines[0])
		}
		for _, want := range []string{
			"commit:        feedface0123",
			"go:            " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH,
			"cloud drivers: none",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("enclave %s: output %q lacks %q", arg, out, want)
			}
		}
	}
}

// Without link-time values the commit comes from the build info, which go
// build stamps from the repository (vcs.revision).
func TestVersionFromBuildInfo(t *testing.T) {
	bin := buildEnclave(t, "-buildvcs=auto")
	// What the toolchain stamped: a checkout without usable VCS data (an
	// exported tree, a linked worktree some git versions cannot describe)
	// has no vcs.revision, and then there is nothing to read back.
	info, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatalf("go version -m: %v", err)
	}
	var rev string
	for _, line := range strings.Split(string(info), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "build" && strings.HasPrefix(f[1], "vcs.revision=") {
			rev = strings.TrimPrefix(f[1], "vcs.revision=")
		}
	}
	if len(rev) < 12 {
		t.Skip("the toolchain stamped no vcs.revision into this build")
	}
	code, out, errOut := runEnclave(t, bin, "--version")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	// Go stamps the main module's version from the repository too
	// (v0.0.0-<time>-<revision>[+dirty]); older toolchains say (devel).
	first, _, _ := strings.Cut(out, "\n")
	if !strings.HasPrefix(first, "enclave ") || !strings.Contains(first, rev[:12]) {
		t.Errorf("first line of %q does not carry the revision %s", out, rev[:12])
	}
	if !strings.Contains(out, "commit:        "+rev) {
		t.Errorf("output %q lacks the full commit %s", out, rev)
	}
}

// The cloud drivers are opted into with build tags; without them a cloud
// URL fails at start-up with the tag to build with.
func TestCloudDriverBuildTags(t *testing.T) {
	def := buildEnclave(t)
	code, _, errOut := runEnclave(t, def, "migrate", "--blob-url", "s3://bucket?region=us-east-1")
	if code == 0 || !strings.Contains(errOut, "-tags aws") || !strings.Contains(errOut, "s3://") {
		t.Fatalf("the default build with an s3:// URL: exit %d, stderr %q", code, errOut)
	}
	code, _, errOut = runEnclave(t, def, "migrate", "--keeper-url", "azurekeyvault://vault.example/keys/k")
	if code == 0 || !strings.Contains(errOut, "-tags azure") {
		t.Fatalf("the default build with an azurekeyvault:// URL: exit %d, stderr %q", code, errOut)
	}

	full := buildEnclave(t, "-tags", "full")
	code, out, errOut := runEnclave(t, full, "version")
	if code != 0 || !strings.Contains(out, "cloud drivers: aws, azure, gcp") {
		t.Fatalf("-tags full: exit %d, out %q, stderr %q", code, out, errOut)
	}
	// With the driver linked, the same URL gets past the check to the
	// driver itself (no Azure account is configured: it fails there,
	// without any network).
	code, _, errOut = runEnclave(t, full, "migrate", "--blob-url", "azblob://container")
	if code == 0 || strings.Contains(errOut, "-tags") || !strings.Contains(errOut, "azureblob") {
		t.Fatalf("-tags full with an azblob:// URL: exit %d, stderr %q", code, errOut)
	}
}

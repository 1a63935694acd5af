package version

import (
	"runtime/debug"
	"testing"
)

func TestFromInfo(t *testing.T) {
	for _, tc := range []struct {
		name string
		info debug.BuildInfo
		want string
	}{
		{"module version", debug.BuildInfo{Main: debug.Module{Version: "v1.4.0"}}, "v1.4.0"},
		{"work tree", debug.BuildInfo{Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}}}, "(devel) 0123456789ab"},
		{"dirty work tree", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"}}}, "(devel) 0123456789ab+dirty"},
		{"nothing known", debug.BuildInfo{}, "(devel)"},
	} {
		if got := fromInfo(&tc.info); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestLinkerOverride(t *testing.T) {
	old := version
	t.Cleanup(func() { version = old })
	version = "v9.9.9"
	if got := String(); got != "v9.9.9" {
		t.Fatalf("String() = %q with the link-time value set", got)
	}
}

func TestCommitOf(t *testing.T) {
	rev := "0123456789abcdef0123456789abcdef01234567"
	for _, tc := range []struct {
		name string
		info debug.BuildInfo
		want string
	}{
		{"clean", debug.BuildInfo{Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: "false"}}}, rev},
		{"dirty", debug.BuildInfo{Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: "true"}}}, rev + "+dirty"},
		{"no VCS", debug.BuildInfo{Main: debug.Module{Version: "v1.0.0"}}, "unknown"},
	} {
		if got := commitOf(&tc.info); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestCommitLinkerOverride(t *testing.T) {
	old := commit
	t.Cleanup(func() { commit = old })
	commit = "abcdef"
	if got := Commit(); got != "abcdef" {
		t.Fatalf("Commit() = %q with the link-time value set", got)
	}
}

package main

import (
	"os"
	"strings"
	"testing"
)

// TestMailPart runs the mail row at a small size on SQLite and, when
// ENCLAVE_TEST_POSTGRES is set, PostgreSQL: real deliveries through the
// SMTP listener, every 250 a stored message, then mailList; and prints
// its table with the target.
func TestMailPart(t *testing.T) {
	dbs := []string{"sqlite"}
	if os.Getenv("ENCLAVE_TEST_POSTGRES") != "" {
		dbs = append(dbs, "postgres")
	}
	var rs []MailResult
	for _, db := range dbs {
		out, err := captureStdout(t, func() error {
			return mailMain([]string{"-db", db, "-sessions", "3", "-mailboxes", "2", "-warmup", "200ms", "-duration", "1s", "-list", "300", "-list-calls", "20"})
		})
		if err != nil {
			t.Fatalf("%s: %v", db, err)
		}
		var r MailResult
		resultLine(t, out, &r)
		if r.DB != db || r.Deliveries == 0 || r.PerSecond <= 0 || r.Errors != 0 || r.Stored < r.Deliveries || r.P50ms <= 0 {
			t.Fatalf("%s deliveries: %+v", db, r)
		}
		if r.MessageBytes < 100*1024 || r.MessageBytes > 110*1024 {
			t.Errorf("%s: messages of %d bytes, want about 100 KB", db, r.MessageBytes)
		}
		if r.ListMessages != 300 || r.ListCalls != 20 || r.ListP50ms <= 0 {
			t.Fatalf("%s mailList: %+v", db, r)
		}
		rs = append(rs, r)
	}
	var b strings.Builder
	rs[0].PerSecond = 150
	printMail(&b, rs)
	for _, want := range []string{"| sqlite", "0.75", "≥ 200/s: NOT reached (150.0/s, 0.75×)"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("missing %q in:\n%s", want, b.String())
		}
	}
}

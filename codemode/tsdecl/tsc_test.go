package tsdecl_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/enclave-mcp/enclave/codemode/tsdecl"
)

// TestTypeScriptCompiles type-checks the generated declarations with the
// real TypeScript compiler (strict mode), installed with npm into a
// temporary directory. It needs node, npm and the registry, so it runs only
// with ENCLAVE_TEST_TSC=1.
func TestTypeScriptCompiles(t *testing.T) {
	if os.Getenv("ENCLAVE_TEST_TSC") != "1" {
		t.Skip("set ENCLAVE_TEST_TSC=1 to type-check the output with tsc")
	}
	if _, err := exec.LookPath("npm"); err != nil {
		t.Skip("npm is not installed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	install := exec.CommandContext(ctx, "npm", "install", "--no-audit", "--no-fund", "--prefix", dir, "typescript@5")
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("npm install typescript: %v\n%s", err, out)
	}

	var src strings.Builder
	src.WriteString(tsdecl.Globals)
	src.WriteString(tsdecl.Declare("codemode", realFuncs(t)))
	for i, tt := range typeTests {
		fmt.Fprintf(&src, "// %s\ntype T%d = %s;\n", strings.ReplaceAll(tt.name, "\n", " "), i, tsdecl.Type(json.RawMessage(tt.schema)))
	}
	// Use the declarations the way an agent's code would.
	src.WriteString(`
async function main(): Promise<void> {
  const page = await codemode.secretList({ limit: 10 });
  for (const s of page.secrets ?? []) {
    const name: string = s.name;
    const hosts: string[] = s.allowedHosts ?? [];
    console.log(name, hosts, page.nextCursor);
  }
  await codemode.secretList();
  const { deleted } = await codemode.secretDelete({ name: "x" });
  const sink = await codemode.kitchenSink({ when: "2026-01-01T00:00:00Z", ratio: 1, count: null, nested: { deep: [{ x: 1 }] }, tags: { a: "b" } });
  const ok: boolean = sink.ok && deleted;
  const res = await fetch("https://example.com", { method: "POST", headers: { "content-type": "application/json" }, body: "{}" });
  const text: string = await res.text();
  await storage.set("k", { ok, text, status: res.status });
  const keys: string[] = (await storage.list({ prefix: "k" })).keys;
  console.error(keys, await storage.get("k"), await storage.delete("k"));
}
main();
`)
	file := filepath.Join(dir, "decl.ts")
	if err := os.WriteFile(file, []byte(src.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	// No DOM or Node typings: the sandbox's fetch and console are Globals'.
	config := `{"compilerOptions": {"noEmit": true, "strict": true, "target": "es2022", "lib": ["es2022"], "types": []}, "files": ["decl.ts"]}`
	if err := os.WriteFile(filepath.Join(dir, "tsconfig.json"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	tsc := exec.CommandContext(ctx, filepath.Join(dir, "node_modules", ".bin", "tsc"), "-p", dir)
	if out, err := tsc.CombinedOutput(); err != nil {
		t.Fatalf("tsc: %v\n%s\n--- decl.ts ---\n%s", err, out, numbered(src.String()))
	}
}

func numbered(s string) string {
	var b strings.Builder
	for i, l := range strings.Split(s, "\n") {
		fmt.Fprintf(&b, "%4d  %s\n", i+1, l)
	}
	return b.String()
}

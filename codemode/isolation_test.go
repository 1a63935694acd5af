package codemode_test

import (
	"encoding/json"
	"testing"

	"github.com/enclave-mcp/enclave/enclavetest"
)

// pollute changes, in one run, every kind of state a VM could carry to the
// next if it were kept: globals, the built-in prototypes and objects, a
// property that cannot be deleted, the symbol registry, the bindings and
// the run's storage bucket.
const pollute = `
const me = (await codemode.whoami({})).username;
globalThis.leftover = "left by " + me;
Object.prototype.polluted = me;
Object.defineProperty(Object.prototype, "trap", {get() { return me }, configurable: false});
Array.prototype.push = function () { return "hijacked by " + me };
Array.prototype.extra = me;
Function.prototype.extra = me;
Promise.prototype.extra = me;
JSON.parse = () => "hijacked by " + me;
Math.random = () => 4;
Object.freeze(Math);
globalThis[Symbol.for("leak")] = me;
globalThis.codemode = {whoami: async () => ({username: "forged by " + me})};
console.log = () => {};
await storage.set("k", me);
return "polluted";`

// check reports what of pollute a run still sees: all false in a fresh VM.
const check = `
const seen = {
	global: typeof leftover !== "undefined",
	objectPrototype: ({}).polluted !== undefined || ({}).trap !== undefined,
	arrayPrototype: [].push(1) !== 1 || [].extra !== undefined,
	functionPrototype: (function () {}).extra !== undefined,
	promisePrototype: Promise.resolve().extra !== undefined,
	json: JSON.parse("1") !== 1,
	math: Object.isFrozen(Math) || Math.random() === 4,
	symbolRegistry: globalThis[Symbol.for("leak")] !== undefined,
	bindings: (await codemode.whoami({})).username !== expected(),
	storage: (await storage.get("k")) !== null,
};
function expected() { return ME; }
console.log("still captured");
return seen;`

// TestNoStateSurvivesARun proves that nothing one run does to its VM is
// seen by the next run: the same user's, again and again, or another
// user's.
func TestNoStateSurvivesARun(t *testing.T) {
	enclavetest.Each(t, enclavetest.Options{}, func(t *testing.T, s *enclavetest.Server) {
		alice, bob := s.CreateUser(t, "alice"), s.CreateUser(t, "bob")
		a, b := alice.MCP(t), bob.MCP(t)

		o := execute(t, a, pollute)
		mustSucceed(t, o)
		if string(o.Result) != `"polluted"` {
			t.Fatalf("the polluting run returned %s", o.Result)
		}
		for i, c := range []struct {
			client *enclavetest.Client
			name   string
		}{{a, "alice"}, {a, "alice"}, {a, "alice"}, {b, "bob"}} {
			o := execute(t, c.client, "const ME = "+quote(c.name)+";"+check)
			mustSucceed(t, o)
			var seen map[string]bool
			if err := json.Unmarshal(o.Result, &seen); err != nil || len(seen) != 10 {
				t.Fatalf("run %d (%s): result %s (%v)", i, c.name, o.Result, err)
			}
			for what, leaked := range seen {
				if leaked {
					t.Errorf("run %d (%s) sees the %s state of an earlier run", i, c.name, what)
				}
			}
			if len(o.Logs) != 1 || o.Logs[0].Message != "still captured" {
				t.Errorf("run %d (%s): console replaced by an earlier run: logs %+v", i, c.name, o.Logs)
			}
		}
	})
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

package mcp

import "testing"

// hiddenIDs are ids a decoder may write back in another spelling.
var hiddenIDs = []string{`-0`, `-0.0`, `-0e3`, `0`, `1e2`, `1.0`, `1.5`, `-1.25e-7`, `1e21`, `1e-7`,
	`9223372036854775807`, `9223372036854775808`, `-9223372036854775808`, `18446744073709551616`,
	`12345678901234567890123`, `"\u0041\n\u00e9<>&"`, `"\ud83d\ude00"`, `""`, `null`, `{"b":1,"a":2}`, `[1,2]`, `true`}

// TestHiddenToolIDsAnsweredLikeUnknown sends the same 2026-07-28
// tools/call naming a hidden tool and naming an unknown one, for ids that
// a decoder may write back in another spelling (negative zero, exponents,
// fractions, numbers beyond int64 and float64 precision, escapes in
// strings): the two answers must be byte for byte the same, the id's
// spelling included, or the spelling tells a hidden tool from an unknown
// one.
func TestHiddenToolIDsAnsweredLikeUnknown(t *testing.T) {
	fx := taskFixture(t)
	directCaps(t, fx.reg)
	modernCaps(t, fx.reg)
	lw := &lateWriter{}
	lw.register(t, fx.reg)
	for _, id := range hiddenIDs {
		send := func(tool string) wireAnswer {
			body := `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"` + tool + `","arguments":{},` +
				`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
			h := map[string]string{"Authorization": "Bearer alice-token", "Content-Type": "application/json",
				versionHeader: "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": tool}
			return fuzzServe(t, fx, lw, h, body)
		}
		a, twin := send(hiddenTool), send(unknownTwin)
		checkInvariants(t, id, a)
		checkTwin(t, "id "+id, a, twin)
	}
}

// TestHiddenToolIDsAnsweredLikeUnknownInSession is the same comparison in
// a session of the earlier protocol.
func TestHiddenToolIDsAnsweredLikeUnknownInSession(t *testing.T) {
	fx := newFixture(t)
	directCaps(t, fx.reg)
	lw := &lateWriter{}
	lw.register(t, fx.reg)
	const token = "alice-notes-token"
	sid := fx.initialize(token)
	for _, id := range hiddenIDs {
		send := func(tool string) wireAnswer {
			body := `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"` + tool + `","arguments":{}}}`
			h := map[string]string{"Authorization": "Bearer " + token, "Content-Type": "application/json", sessionHeader: sid, versionHeader: testProtocol}
			return fuzzServe(t, fx, lw, h, body)
		}
		a, twin := send(hiddenTool), send(unknownTwin)
		checkInvariants(t, id, a)
		checkTwin(t, "id "+id, a, twin)
	}
}

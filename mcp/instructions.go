package mcp

import "strings"

// DefaultInstructions is what clients are told about a server at
// initialize when Options.Instructions is empty: what the server named
// site is, how to find its capabilities without reading every tool, and
// the domains that are on. It names only capabilities has reports
// (capabilities.Registry.Has).
func DefaultInstructions(site string, has func(name string) bool) string {
	var b strings.Builder
	b.WriteString(site + " is a multi-user MCP server: every tool acts for the signed-in account, on that account's own data, within its roles and permissions.")
	b.WriteString(" To find the tool for a task, call capabilitiesSearch with a few keywords; whoami tells who is signed in and what they may do.")
	if has("execute") {
		b.WriteString(" For several calls in a row, loops or filtering large answers, write one JavaScript program for execute: it calls the same tools as await codemode.<name>(args) (codemodeTypes lists their TypeScript declarations), and only what it returns comes back.")
	}
	if has("memorySave") {
		b.WriteString(" Keep facts across conversations with memorySave and recall them with memorySearch.")
	}
	if has("httpRequest") {
		b.WriteString(" httpRequest reaches public https APIs; a stored secret is written {{secret:NAME}} and is sent only to the hosts its owner approved.")
	}
	b.WriteString(" A refused call says why; do not retry it unchanged.")
	return b.String()
}

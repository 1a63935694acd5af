// Package e2e holds the end-to-end suites that need a whole server: browser
// journeys in headless Chromium, real SMTP and OAuth peers, second servers
// standing in for the outside world. It has no production code; each suite
// builds its servers with enclavetest (or the real binary) and stops them.
//
// Tests that drive the assembled server's handler directly, stand a test
// token verifier in for OAuth, or restart servers on one database build them
// with the one builder in server_test.go (newServer, serveHTTP, openServer,
// newServerError); answers of /mcp are read with enclavetest.Message.
//
// Suites that need components outside Go are selected by the environment
// variables .ci/run sets (ENCLAVE_TEST_CHROMIUM, ENCLAVE_TEST_POSTGRES, ...)
// and then run rather than skip. Files are named after the domain they
// exercise (mail_test.go, community_test.go, ...).
package e2e

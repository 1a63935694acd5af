// Package e2e holds the end-to-end suites that need a whole server: browser
// journeys in headless Chromium, real SMTP and OAuth peers, second servers
// standing in for the outside world. It has no production code; each suite
// builds its servers with enclavetest (or the real binary) and stops them.
//
// Suites that need components outside Go are selected by the environment
// variables .ci/run sets (ENCLAVE_TEST_CHROMIUM, ENCLAVE_TEST_POSTGRES, ...)
// and then run rather than skip. Files are named after the domain they
// exercise (mail_test.go, community_test.go, ...).
package e2e

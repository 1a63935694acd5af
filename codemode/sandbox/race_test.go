//go:build race

package sandbox

// raceEnabled is set when the race detector is on. It makes the engine,
// which is Go code, some 50 times slower.
const raceEnabled = true

//go:build race

package front

// raceEnabled: the test binary has the race detector, and so does the skewgate it builds.
const raceEnabled = true

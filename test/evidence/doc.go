// Package evidence checks that the end-to-end figures README.md quotes come from artifacts that
// passed, at the code they describe. It has tests only.
package evidence

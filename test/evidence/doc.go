// Package evidence checks that the figures README.md quotes come from artifacts that passed, at
// the code they describe (bench/results/e2e/*.json from the end-to-end tests, bench/results/
// results.json from make bench), and that each README number is its artifact's: figures_test.go
// names, per figure, the README sentence and the artifact field it states. It has tests only.
package evidence

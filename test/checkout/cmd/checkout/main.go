// Command checkout prints what checkout.Current returns, as "<commit> <dirty>" (dirty is true or
// false): hack/maketest.sh records it in bench/results/maketest.json, so that artifact's commit and
// dirty flag mean what those of test/bench and test/e2e mean.
package main

import (
	"fmt"

	"github.com/skewgate/skewgate/test/checkout"
)

func main() {
	commit, dirty := checkout.Current()
	fmt.Println(commit, dirty)
}

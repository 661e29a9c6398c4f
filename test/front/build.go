package front

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// SkewgateBinEnv names a built skewgate binary for the fronts and nodes to run (`make test` builds
// one). Unset, the first skewgate a test process starts builds cmd/skewgate of the checkout the test
// runs in (go build, with -race when the test binary has it), once per test process.
const SkewgateBinEnv = "SKEWGATE_BIN"

var built struct {
	once sync.Once
	path string
	err  error
}

// skewgateBinary returns $SKEWGATE_BIN, or builds the binary once into a directory of this process
// (skewgate-front-<pid> in the temporary directory); directories of test processes that have ended
// are removed first.
func skewgateBinary() (string, error) {
	if p := os.Getenv(SkewgateBinEnv); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("front: %s: %w", SkewgateBinEnv, err)
		}
		return p, nil
	}
	built.once.Do(func() {
		removeStaleBuilds()
		dir := filepath.Join(os.TempDir(), "skewgate-front-"+strconv.Itoa(os.Getpid()))
		if built.err = os.MkdirAll(dir, 0o755); built.err != nil {
			return
		}
		path := filepath.Join(dir, "skewgate")
		args := []string{"build", "-buildvcs=false", "-o", path}
		if raceEnabled {
			args = append(args, "-race")
		}
		// Run where the test runs: inside this module, so the package is this checkout's.
		cmd := exec.Command("go", append(args, "github.com/skewgate/skewgate/cmd/skewgate")...)
		if out, err := cmd.CombinedOutput(); err != nil {
			built.err = fmt.Errorf("front: building skewgate (or set %s): %v\n%s", SkewgateBinEnv, err, out)
			return
		}
		built.path = path
	})
	return built.path, built.err
}

// removeStaleBuilds removes the build directories of test processes that no longer run.
func removeStaleBuilds() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "skewgate-front-*"))
	for _, d := range dirs {
		pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), "skewgate-front-"))
		if err != nil || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			os.RemoveAll(d)
		}
	}
}

// SkewgateBinary is the skewgate binary fronts and nodes run, built first when needed (see
// SkewgateBinEnv): a test that times a start calls it before its clock starts, so the build is not
// timed with it.
func SkewgateBinary() (string, error) { return skewgateBinary() }

package kubeadm

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// refused runs the command on n, a dry run and then a real one, and checks that each is refused
// with an error containing want and that nothing under n.root changed: no path created, removed,
// written, chmodded or touched (modification times included).
func refused(t *testing.T, n *node, want string) {
	t.Helper()
	before := snapshot(t, n.root)
	for _, dryRun := range []bool{true, false} {
		plan, err := Render(n.options())
		if err == nil {
			_, err = Apply(plan, dryRun, io.Discard)
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("dry run %v: error %v, want one with %q", dryRun, err, want)
		}
	}
	if changed := diff(before, snapshot(t, n.root)); len(changed) > 0 {
		t.Errorf("a refused run changed %d paths: %v", len(changed), changed)
	}
}

// diff lists the paths that differ between two snapshots.
func diff(before, after map[string]string) []string {
	var out []string
	for p, v := range after {
		if before[p] != v {
			out = append(out, p)
		}
	}
	for p := range before {
		if _, ok := after[p]; !ok {
			out = append(out, p+" (removed)")
		}
	}
	slices.Sort(out)
	return out
}

// outside is a directory beside the node's tree, where a planted symlink points.
func outside(t *testing.T, n *node) string {
	t.Helper()
	dir := filepath.Join(n.root, "outside")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.RemoveAll(link); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// copyTo copies the file at src to dst with mode.
func copyTo(t *testing.T, src, dst string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	write(t, dst, b, mode)
	if err := os.Chmod(dst, mode); err != nil {
		t.Fatal(err)
	}
}

// Each attack plants something on a node the command ran on, where a rerun would write or chmod.
// Before these were refused, a symlinked directory was followed (chmodded, and given the files
// with the keys), and a symlinked file whose content was already right was chmodded through the
// link.
func TestRerunRefuses(t *testing.T) {
	cfg := func(n *node, rel ...string) string {
		return filepath.Join(append([]string{n.root, "skewgate"}, rel...)...)
	}
	for _, tc := range []struct {
		name  string
		plant func(t *testing.T, n *node) (path string)
		want  string // after the path
	}{
		{"envoy dir", func(t *testing.T, n *node) string {
			symlink(t, outside(t, n), cfg(n, "envoy"))
			return cfg(n, "envoy")
		}, "it is a symbolic link"},
		{"skewgate dir", func(t *testing.T, n *node) string {
			symlink(t, outside(t, n), cfg(n, "skewgate"))
			return cfg(n, "skewgate")
		}, "it is a symbolic link"},
		{"config dir", func(t *testing.T, n *node) string {
			moved := filepath.Join(outside(t, n), "config")
			if err := os.Rename(cfg(n), moved); err != nil {
				t.Fatal(err)
			}
			symlink(t, moved, cfg(n))
			return cfg(n)
		}, "it is a symbolic link"},
		{"socket dir", func(t *testing.T, n *node) string {
			sockets := filepath.Join(n.root, "sockets")
			symlink(t, outside(t, n), sockets)
			return sockets
		}, "it is a symbolic link"},
		{"same file", func(t *testing.T, n *node) string {
			// The copy is 0600: a chmod through the link would make it 0644.
			target := filepath.Join(outside(t, n), "apiserver.crt")
			copyTo(t, cfg(n, "envoy", "apiserver.crt"), target, 0o600)
			symlink(t, target, cfg(n, "envoy", "apiserver.crt"))
			return cfg(n, "envoy", "apiserver.crt")
		}, "it is a symbolic link"},
		{"key", func(t *testing.T, n *node) string {
			target := filepath.Join(outside(t, n), "stolen.key")
			write(t, target, []byte("not the key"), 0o644)
			symlink(t, target, cfg(n, "envoy", "apiserver.key"))
			return cfg(n, "envoy", "apiserver.key")
		}, "it is a symbolic link"},
		{"client cert", func(t *testing.T, n *node) string {
			target := filepath.Join(outside(t, n), "skewgate.crt")
			copyTo(t, cfg(n, "skewgate", "skewgate.crt"), target, 0o600)
			symlink(t, target, cfg(n, "skewgate", "skewgate.crt"))
			return cfg(n, "skewgate", "skewgate.crt")
		}, "it is a symbolic link"},
		{"manifest", func(t *testing.T, n *node) string {
			manifest := filepath.Join(n.root, "manifests", "skewgate.yaml")
			target := filepath.Join(outside(t, n), "skewgate.yaml")
			copyTo(t, manifest, target, 0o644)
			symlink(t, target, manifest)
			return manifest
		}, "it is a symbolic link"},
		{"temp name", func(t *testing.T, n *node) string {
			// The bootstrap differs, so the rerun would write it through its temporary name.
			write(t, cfg(n, "envoy", "bootstrap.yaml"), []byte("edited"), 0o644)
			target := filepath.Join(outside(t, n), "planted")
			write(t, target, []byte("planted"), 0o644)
			symlink(t, target, cfg(n, "envoy", ".bootstrap.yaml.tmp"))
			return cfg(n, "envoy", ".bootstrap.yaml.tmp")
		}, "it is a symbolic link"},
		{"pipe", func(t *testing.T, n *node) string {
			// Reading it would block the command forever.
			path := cfg(n, "envoy", "bootstrap.yaml")
			os.Remove(path)
			if err := syscall.Mkfifo(path, 0o644); err != nil {
				t.Fatal(err)
			}
			return path
		}, "it exists and is not a regular file (a named pipe)"},
		{"dir as file", func(t *testing.T, n *node) string {
			path := cfg(n, "skewgate", "kubeconfig")
			os.Remove(path)
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
			return path
		}, "it exists and is not a regular file (a directory)"},
		{"file as dir", func(t *testing.T, n *node) string {
			path := filepath.Join(n.root, "sockets")
			os.RemoveAll(path)
			write(t, path, nil, 0o600)
			return path
		}, "it exists and is not a directory (a regular file)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := installed(t)
			path := tc.plant(t, n)
			refused(t, n, "refusing "+path+": "+tc.want)
		})
	}
}

// A first run on a node where someone prepared the config directory with a symlinked envoy/ is
// refused as well, before anything (not even the manifests directory) is created.
func TestFirstRunRefusesAPlantedSymlink(t *testing.T) {
	n := newNode(t)
	if err := os.MkdirAll(filepath.Join(n.root, "skewgate"), 0o755); err != nil {
		t.Fatal(err)
	}
	envoy := filepath.Join(n.root, "skewgate", "envoy")
	symlink(t, outside(t, n), envoy)
	refused(t, n, "refusing "+envoy+": it is a symbolic link")
}

// --manifests-dir is kubeadm's, and the kubelet follows it: a symlinked manifests directory is
// written through (that is where the kubelet reads), but never chmodded.
func TestManifestsDirMayBeASymlink(t *testing.T) {
	n := newNode(t)
	real := filepath.Join(outside(t, n), "manifests")
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	symlink(t, real, filepath.Join(n.root, "manifests"))
	plan, err := Render(n.options())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Apply(plan, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(real, "skewgate-envoy.yaml")); err != nil {
		t.Errorf("the manifest is not where the kubelet reads: %v", err)
	}
	if st, _ := os.Stat(real); st.Mode().Perm() != 0o755 {
		t.Errorf("the manifests directory became %v", st.Mode())
	}
}

// A file hard-linked to one outside the tree is replaced, not chmodded: a chmod would change the
// outside file's mode as well.
func TestRerunReplacesAHardLink(t *testing.T) {
	n := installed(t)
	copyPath := filepath.Join(n.root, "skewgate", "envoy", "apiserver.crt")
	target := filepath.Join(outside(t, n), "apiserver.crt")
	copyTo(t, copyPath, target, 0o600)
	os.Remove(copyPath)
	if err := os.Link(target, copyPath); err != nil {
		t.Fatal(err)
	}
	plan, err := Render(n.options())
	if err != nil {
		t.Fatal(err)
	}
	changes, err := Apply(plan, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(changes, Change{copyPath, "update"}) {
		t.Errorf("changes %v, want %s replaced", changes, copyPath)
	}
	if st, _ := os.Stat(target); st.Mode().Perm() != 0o600 {
		t.Errorf("the outside file became %v", st.Mode())
	}
	if a, b := stat(t, target), stat(t, copyPath); os.SameFile(a, b) || b.Mode().Perm() != 0o644 {
		t.Errorf("%s is still the outside file, or not 0644 (%v)", copyPath, b.Mode())
	}
}

func stat(t *testing.T, path string) os.FileInfo {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// A symlink planted at the temporary name after Apply inspected the directory is removed, not
// followed: writeAt unlinks the name and creates it with O_EXCL|O_NOFOLLOW before it writes.
func TestWriteAtDoesNotFollowATemporarySymlink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(t.TempDir(), "target")
	write(t, target, []byte("outside"), 0o644)
	if err := os.Symlink(target, filepath.Join(dir, tempName("apiserver.key"))); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(dir, dirFlags|unix.O_NOFOLLOW, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	path := filepath.Join(dir, "apiserver.key")
	if err := writeAt(fd, "apiserver.key", path, []byte("key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(target); string(b) != "outside" {
		t.Errorf("the symlink's target was written: %q", b)
	}
	if b, _ := os.ReadFile(path); string(b) != "key" || stat(t, path).Mode().Perm() != 0o600 {
		t.Errorf("%s: %q %v, want the key at 0600", path, b, stat(t, path).Mode())
	}
	if _, err := os.Lstat(filepath.Join(dir, tempName("apiserver.key"))); !os.IsNotExist(err) {
		t.Errorf("the temporary name is left: %v", err)
	}
}

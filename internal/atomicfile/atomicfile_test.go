package atomicfile

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func TestWriteFileReplacesWithMode(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "bootstrap.yaml")
	if err := os.WriteFile(p, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(p, []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil || string(b) != "new" {
		t.Fatalf("content %q, %v; want new", b, err)
	}
	st, err := os.Stat(p)
	if err != nil || st.Mode().Perm() != 0o644 {
		t.Fatalf("mode %v, %v; want 0644", st.Mode(), err)
	}
	if _, err := os.Lstat(filepath.Join(dir, TempName("bootstrap.yaml"))); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temporary file left behind: %v", err)
	}
}

// A symlink at the final name is replaced, never written through; one planted at the temporary name
// is removed first (O_EXCL|O_NOFOLLOW would refuse it otherwise), so what it points at is untouched.
func TestWriteFileNeverFollowsSymlinks(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "sds.yaml")
	if err := os.Symlink(victim, p); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(dir, TempName("sds.yaml"))); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(p, []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep" {
		t.Errorf("symlink target rewritten: %q", b)
	}
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		t.Errorf("%s is not a regular file after the write: %v", p, err)
	}
}

func TestWriteFileMissingDirectory(t *testing.T) {
	p := filepath.Join(t.TempDir(), "missing", "f")
	if err := WriteFile(p, []byte("x"), 0o644); !errors.Is(err, unix.ENOENT) {
		t.Errorf("WriteFile into a missing directory = %v, want ENOENT", err)
	}
}

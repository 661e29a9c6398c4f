package install

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Change is what Apply did (or, in a dry run, would do) to one path.
type Change struct {
	Path   string
	Action string // "create", "update", "chmod" or "unchanged"
}

// Apply carries out plan: directories are created or their mode corrected, and every file whose
// content or mode differs is replaced by a rename in its directory (the kubelet and Envoy never read
// a half-written file). Files that are already right are not touched. With dryRun nothing is
// written; every change is printed to w with its content, private keys redacted.
func Apply(plan *Plan, dryRun bool, w io.Writer) ([]Change, error) {
	if err := checkOwners(plan.Dirs); err != nil {
		return nil, err
	}
	var changes []Change
	for _, d := range plan.Dirs {
		action := "unchanged"
		st, err := os.Stat(d.Path)
		switch {
		case os.IsNotExist(err):
			action = "create"
		case err != nil:
			return changes, err
		case !st.IsDir():
			return changes, fmt.Errorf("%s exists and is not a directory", d.Path)
		case st.Mode().Perm() != d.Mode && !d.Foreign:
			action = "chmod"
		}
		changes = append(changes, Change{d.Path + "/", action})
		if dryRun {
			if action != "unchanged" {
				fmt.Fprintf(w, "# would %s directory %s (%04o)\n", action, d.Path, d.Mode)
			}
			continue
		}
		if err := os.MkdirAll(d.Path, d.Mode); err != nil {
			return changes, err
		}
		if action != "unchanged" {
			if err := os.Chmod(d.Path, d.Mode); err != nil {
				return changes, err
			}
		}
	}
	for _, f := range plan.Files {
		action := "unchanged"
		old, err := os.ReadFile(f.Path)
		switch {
		case os.IsNotExist(err):
			action = "create"
		case err != nil:
			return changes, err
		case !bytes.Equal(old, f.Data):
			action = "update"
		default:
			if st, err := os.Stat(f.Path); err != nil {
				return changes, err
			} else if st.Mode().Perm() != f.Mode {
				action = "chmod"
			}
		}
		changes = append(changes, Change{f.Path, action})
		if action == "unchanged" {
			continue
		}
		if dryRun {
			data := f.Data
			if f.Secret {
				data = redact(data)
			}
			fmt.Fprintf(w, "# would %s %s (%04o)\n%s", action, f.Path, f.Mode, data)
			if len(data) > 0 && data[len(data)-1] != '\n' {
				fmt.Fprintln(w)
			}
			continue
		}
		if action == "chmod" {
			err = os.Chmod(f.Path, f.Mode)
		} else {
			err = writeAtomic(f.Path, f.Data, f.Mode)
		}
		if err != nil {
			return changes, err
		}
	}
	return changes, nil
}

func writeAtomic(path string, data []byte, mode fs.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	// Chmod before writing: a key is never readable by others, not even while it is written.
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// checkOwners refuses, before anything is written, a directory of ours that exists and belongs to
// another user than the one running the command (root on a node): whoever owns the socket or
// config directory could replace the sockets or the files the pods read.
func checkOwners(dirs []Dir) error {
	for _, d := range dirs {
		if d.Foreign {
			continue
		}
		st, err := os.Stat(d.Path)
		if err != nil {
			continue // absent: created below; other errors are reported there
		}
		if sys, ok := st.Sys().(*syscall.Stat_t); ok && int(sys.Uid) != os.Geteuid() {
			return fmt.Errorf("%s belongs to uid %d, not to the user running this command (uid %d): remove it or chown it first", d.Path, sys.Uid, os.Geteuid())
		}
	}
	return nil
}

package main

import (
	"archive/zip"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// module is this module's path.
const module = "github.com/leasehold-go/leasehold"

// TestInstallFromAModuleProxy installs the CLI as the README tells users
// to, "go install github.com/leasehold-go/leasehold/cmd/leasehold@VERSION",
// through a file-based module proxy that serves this working tree, so that
// the module is what a proxy would hand out. The go command refuses such
// an install when go.mod has a replace or exclude directive; dependencies
// come from the usual proxy (or the module cache).
func TestInstallFromAModuleProxy(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the CLI from a module proxy")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	// A version of its own per run, so that the install reads this tree,
	// not a module an earlier run left in the module cache; the test
	// removes it from the cache afterwards.
	version := "v0.0.0-" + time.Now().UTC().Format("20060102150405") + fmt.Sprintf("-%012x", time.Now().UnixNano()&0xffffffffffff)
	proxy := t.TempDir()
	if err := writeModuleProxy(proxy, root, version); err != nil {
		t.Fatal(err)
	}
	modcache := strings.TrimSpace(goEnv(t, "GOMODCACHE"))
	t.Cleanup(func() {
		_ = os.RemoveAll(filepath.Join(modcache, filepath.FromSlash(module)+"@"+version))
		_ = os.RemoveAll(filepath.Join(modcache, "cache", "download", filepath.FromSlash(module), "@v"))
	})
	gobin := t.TempDir()
	upstream := strings.TrimSpace(goEnv(t, "GOPROXY"))
	cmd := exec.CommandContext(t.Context(), "go", "install", module+"/cmd/leasehold@"+version)
	cmd.Dir = t.TempDir() // outside this module: the install must not see its go.mod
	cmd.Env = append(os.Environ(),
		"GOBIN="+gobin,
		"GOFLAGS=-mod=mod -modcacherw",
		"GOPROXY=file://"+filepath.ToSlash(proxy)+","+upstream,
		"GONOSUMDB="+module, // the test's version is in no checksum database
		"GOWORK=off",
	)
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go install from the module proxy: %v\n%s", err, out)
	}
	t.Logf("installed in %v", time.Since(start).Round(time.Millisecond))
	out, err := exec.CommandContext(t.Context(), filepath.Join(gobin, "leasehold"), "help").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "leader") {
		t.Fatalf("the installed CLI: %v\n%s", err, out)
	}
}

func goEnv(t *testing.T, name string) string {
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// writeModuleProxy lays out a GOPROXY directory that serves the module at
// root as version: its list, info, go.mod and zip (every file of
// the tree but version control, and no nested module such as bench/).
func writeModuleProxy(proxy, root, version string) error {
	dir := filepath.Join(proxy, filepath.FromSlash(module), "@v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return err
	}
	info := fmt.Sprintf(`{"Version":%q,"Time":"2026-11-24T00:00:00Z"}`, version)
	for name, data := range map[string][]byte{
		"list":            []byte(version + "\n"),
		version + ".info": []byte(info),
		version + ".mod":  gomod,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return err
		}
	}
	f, err := os.Create(filepath.Join(dir, version+".zip"))
	if err != nil {
		return err
	}
	defer f.Close()
	z := zip.NewWriter(f)
	prefix := module + "@" + version + "/"
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			if rel == "." {
				return nil
			}
			if strings.HasPrefix(d.Name(), ".") || d.Name() == "vendor" {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir // a module of its own
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		w, err := z.Create(prefix + filepath.ToSlash(rel))
		if err != nil {
			return err
		}
		_, err = w.Write(data)
		return err
	})
	if err != nil {
		return err
	}
	return z.Close()
}

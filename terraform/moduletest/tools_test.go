package moduletest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// toolEnv is what terraform/test/setup.sh prepared.
type toolEnv struct {
	terraform       string // terraform executable
	cliConfig       string // TF_CLI_CONFIG_FILE: hashicorp/aws from the local mirror
	tflint          string
	providerVersion string // of the mirrored stand-in: the real provider's the schema came from
	schema          string // the generated schema file
}

var setupTools = sync.OnceValues(func() (*toolEnv, error) {
	tf, err := exec.LookPath("terraform")
	if err != nil {
		return nil, errors.New("terraform is not on PATH. The module's tests need Terraform 1.9 or later " +
			"(1.11.4 is tested): install it from HashiCorp's releases (release zip or apt repository). " +
			"`go install github.com/hashicorp/terraform@v1.11.4` does not work: its go.mod has replace " +
			"directives pointing at nested modules the Go module proxy does not serve")
	}
	// The first run installs the npm package and builds the provider and
	// tflint (a few minutes); later runs check their stamps in a second.
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	script := filepath.Join(moduleDir(), "test", "setup.sh")
	cmd := exec.CommandContext(ctx, "bash", script)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s failed after %s: %w\n%s%s", script, time.Since(start).Round(time.Second), err, stderr.String(), stdout.String())
	}
	kv := map[string]string{}
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			kv[k] = v
		}
	}
	env := &toolEnv{
		terraform: tf, cliConfig: kv["TF_CLI_CONFIG_FILE"], tflint: kv["TFLINT"],
		providerVersion: kv["PROVIDER_VERSION"], schema: kv["PROVIDER_SCHEMA"],
	}
	if env.cliConfig == "" || env.tflint == "" || env.providerVersion == "" || env.schema == "" {
		return nil, fmt.Errorf("%s printed %q, want TF_CLI_CONFIG_FILE, TFLINT, PROVIDER_VERSION and PROVIDER_SCHEMA", script, stdout.String())
	}
	return env, nil
})

// tools runs the setup once per test binary and fails t if it failed.
func tools(t *testing.T) *toolEnv {
	t.Helper()
	env, err := setupTools()
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// copyModule copies the module (its .tf files, .tflint.hcl, tests/ and
// examples/; not test/ or moduletest/) into a temporary directory, where
// terraform init may write .terraform and its lock file.
func copyModule(t *testing.T) string {
	t.Helper()
	src := moduleDir()
	dst := t.TempDir()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch {
			case rel == ".":
				return nil
			case rel == "test" || rel == "moduletest" || d.Name() == ".terraform" || strings.HasPrefix(d.Name(), "."):
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		if strings.HasSuffix(d.Name(), ".tfstate") || d.Name() == ".terraform.lock.hcl" {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// run runs a tool in dir with the mirror's CLI config and no TF_* variables
// from the caller's environment, and returns its combined output.
func (env *toolEnv) run(t *testing.T, dir, tool string, args ...string) (string, error) {
	t.Helper()
	return env.runEnv(t, dir, nil, tool, args...)
}

// runEnv is run with extra environment variables (KEY=VALUE).
func (env *toolEnv) runEnv(t *testing.T, dir string, extra []string, tool string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, tool, args...)
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TF_") && !strings.HasPrefix(kv, "CHECKPOINT_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env,
		"TF_CLI_CONFIG_FILE="+env.cliConfig,
		"CHECKPOINT_DISABLE=1", // no version check against checkpoint-api.hashicorp.com
		"TF_IN_AUTOMATION=1",
		"TF_INPUT=0",
	)
	cmd.Env = append(cmd.Env, extra...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// terraform runs terraform and fails t if it fails.
func (env *toolEnv) tf(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := env.run(t, dir, env.terraform, args...)
	if err != nil {
		t.Fatalf("terraform %s in %s: %v\n%s", strings.Join(args, " "), dir, err, out)
	}
	return out
}

// initDir runs terraform init in dir against the mirror.
func (env *toolEnv) initDir(t *testing.T, dir string) {
	t.Helper()
	env.tf(t, dir, "init", "-input=false", "-no-color", "-backend=false")
}

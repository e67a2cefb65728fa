package moduletest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2/hclwrite"
	"github.com/zclconf/go-cty/cty"
	"go.yaml.in/yaml/v3"

	"github.com/sluice-dev/sluice/internal/node"
	"github.com/sluice-dev/sluice/topology"
)

func TestFormat(t *testing.T) {
	t.Parallel()
	env := tools(t)
	dir := copyModule(t)
	out, err := env.run(t, dir, env.terraform, "fmt", "-check", "-recursive", "-diff", "-no-color")
	if err != nil {
		t.Fatalf("terraform fmt -check -recursive: %v (run terraform fmt -recursive terraform/)\n%s", err, out)
	}
}

// TestValidate initialises the module and the complete example against the
// schema-only provider and validates them: every argument's name, type and
// required-ness is checked against the real provider's schema.
func TestValidate(t *testing.T) {
	t.Parallel()
	env := tools(t)
	for _, sub := range []string{".", "examples/complete"} {
		t.Run(sub, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(copyModule(t), sub)
			env.initDir(t, dir)
			if out := env.tf(t, dir, "validate", "-no-color"); !strings.Contains(out, "The configuration is valid") {
				t.Fatalf("terraform validate:\n%s", out)
			}
			// init chose the mirrored provider, whose version is the one the
			// schema comes from, within versions.tf's constraint.
			var v struct {
				ProviderSelections map[string]string `json:"provider_selections"`
			}
			if err := json.Unmarshal([]byte(env.tf(t, dir, "version", "-json")), &v); err != nil {
				t.Fatal(err)
			}
			if got := v.ProviderSelections["registry.terraform.io/hashicorp/aws"]; got != env.providerVersion {
				t.Errorf("hashicorp/aws %q selected, want %s", got, env.providerVersion)
			}
		})
	}
}

// TestSchemaCatchesMistakes shows that validate checks the module against
// the real provider's schema: each mistake, made in a copy of the module,
// must fail validation with Terraform's message for it.
func TestSchemaCatchesMistakes(t *testing.T) {
	t.Parallel()
	env := tools(t)
	tests := []struct {
		name, file, old, new, want string
	}{
		{"misspelt argument", "main.tf", "  delay_seconds                     = 0\n", "  delay_second = 0\n", `An argument named "delay_second" is not expected here`},
		{"wrong type", "main.tf", "  delay_seconds                     = 0\n", "  delay_seconds = \"none\"\n", `a number is required`},
		{"computed-only attribute set", "main.tf", "  delay_seconds                     = 0\n", "  arn = \"arn:aws:sqs:eu-west-1:123456789012:x\"\n", `Invalid Configuration for Read-Only Attribute`},
		{"missing required argument", "alarms.tf", "  comparison_operator = \"GreaterThanThreshold\"\n", "", `The argument "comparison_operator" is required`},
		{"misspelt block", "alarms.tf", "  dynamic \"metric_query\" {", "  dynamic \"metric_queries\" {", `Blocks of type "metric_queries" are not expected here`},
		{"unknown resource type", "main.tf", `resource "aws_sqs_queue_redrive_allow_policy" "dlq"`, `resource "aws_sqs_queue_redrive_allowpolicy" "dlq"`, `aws_sqs_queue_redrive_allowpolicy`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := copyModule(t)
			path := filepath.Join(dir, tt.file)
			src, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(src), tt.old) {
				t.Fatalf("%s no longer contains %q: update the test", tt.file, tt.old)
			}
			if err := os.WriteFile(path, []byte(strings.Replace(string(src), tt.old, tt.new, 1)), 0o644); err != nil {
				t.Fatal(err)
			}
			env.initDir(t, dir)
			out, err := env.run(t, dir, env.terraform, "validate", "-no-color")
			if err == nil {
				t.Fatalf("terraform validate passed with the mistake:\n%s", out)
			}
			if !strings.Contains(strings.Join(strings.Fields(out), " "), tt.want) {
				t.Errorf("terraform validate failed without %q:\n%s", tt.want, out)
			}
		})
	}
}

// schemaFile is the part of the generated schema file (written by
// terraform/test/schemaprovider/cmd/genschema, a separate Go module) that
// TestProviderSchema reads.
type schemaFile struct {
	Provider  string `json:"provider"`
	Version   string `json:"version"`
	Source    string `json:"source"`
	Resources map[string]*struct {
		Attributes map[string]*struct {
			Optional bool `json:"optional"`
			Computed bool `json:"computed"`
		} `json:"attributes"`
		BlockTypes map[string]*struct {
			NestingMode string `json:"nesting_mode"`
			Block       struct {
				BlockTypes map[string]*struct {
					MaxItems int `json:"max_items"`
				} `json:"block_types"`
			} `json:"block"`
		} `json:"block_types"`
	} `json:"resource_schemas"`
	DataSources map[string]json.RawMessage `json:"data_source_schemas"`
}

// TestProviderSchema checks the generated schema's provenance and that it
// carries every resource and data source type the module and example use.
func TestProviderSchema(t *testing.T) {
	t.Parallel()
	env := tools(t)
	data, err := os.ReadFile(env.schema)
	if err != nil {
		t.Fatal(err)
	}
	var f schemaFile
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	if f.Provider != "registry.terraform.io/hashicorp/aws" || f.Version != env.providerVersion || !strings.HasPrefix(f.Source, "@cdktf/provider-aws@") {
		t.Errorf("schema of %s %s from %s", f.Provider, f.Version, f.Source)
	}
	for _, typ := range []string{"aws_sqs_queue", "aws_sqs_queue_redrive_allow_policy", "aws_sqs_queue_redrive_policy", "aws_cloudwatch_metric_alarm", "aws_cloudwatch_composite_alarm", "aws_cloudwatch_dashboard", "aws_sns_topic", "aws_iam_policy"} {
		if f.Resources[typ] == nil {
			t.Fatalf("no schema for resource %s", typ)
		}
	}
	for _, typ := range []string{"aws_partition", "aws_region", "aws_caller_identity"} {
		if f.DataSources[typ] == nil {
			t.Errorf("no schema for data source %s", typ)
		}
	}
	// Spot checks against the provider's documented schema.
	if a := f.Resources["aws_sqs_queue"].Attributes["arn"]; a == nil || !a.Computed || a.Optional {
		t.Errorf("aws_sqs_queue.arn: %+v, want computed only", a)
	}
	mq := f.Resources["aws_cloudwatch_metric_alarm"].BlockTypes["metric_query"]
	if mq == nil || mq.NestingMode != "set" || mq.Block.BlockTypes["metric"] == nil || mq.Block.BlockTypes["metric"].MaxItems != 1 {
		t.Errorf("aws_cloudwatch_metric_alarm.metric_query: %+v, want a set block with at most one metric block", mq)
	}
}

func TestTFLint(t *testing.T) {
	t.Parallel()
	env := tools(t)
	dir := copyModule(t)
	out, err := env.run(t, dir, env.tflint, "--recursive", "--config="+filepath.Join(dir, ".tflint.hcl"), "--minimum-failure-severity=notice", "--no-color")
	if err != nil || strings.TrimSpace(out) != "" {
		t.Fatalf("tflint --recursive: %v\n%s", err, out)
	}
}

// TestTerraform runs `terraform test`: the module's own tests/*.tftest.hcl
// and a generated file that applies the module (mock provider) for each
// lane case and writes the rendered queue_config, which the binaries'
// loader (node.LoadTopology) must read as the case's topology.
func TestTerraform(t *testing.T) {
	t.Parallel()
	env := tools(t)
	dir := copyModule(t)
	renderDir := t.TempDir()
	gen := renderTests(t, renderDir)
	if err := os.WriteFile(filepath.Join(dir, "tests", "render_generated.tftest.hcl"), gen, 0o644); err != nil {
		t.Fatal(err)
	}
	env.initDir(t, dir)
	out := env.tf(t, dir, "test", "-no-color")
	t.Logf("terraform test:\n%s", out)
	if !regexp.MustCompile(`Success! \d+ passed, 0 failed`).MatchString(out) {
		t.Fatalf("terraform test did not pass:\n%s", out)
	}
	for _, file := range []string{"topology", "alarms", "outputs", "validation", "render_generated"} {
		if !strings.Contains(out, "tests/"+file+".tftest.hcl... pass") {
			t.Errorf("tests/%s.tftest.hcl did not run and pass", file)
		}
	}

	m := parseModule(t, moduleDir())
	for _, c := range lanesCases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(renderDir, c.name+".yaml")
			text, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("the rendered queue_config was not written: %v", err)
			}
			var warnings bytes.Buffer
			got, err := node.LoadTopology(path, slog.New(slog.NewTextHandler(&warnings, nil)))
			if err != nil {
				t.Fatalf("node.LoadTopology (the binaries' --queues loader): %v\n%s", err, text)
			}
			if warnings.Len() > 0 {
				t.Fatalf("the rendered queue_config uses deprecated keys: %s", warnings.String())
			}
			compareTopology(t, got, c.topo.WithDefaults())

			// The same document as the HCL evaluation of the module.
			var rendered any
			if err := yaml.Unmarshal(text, &rendered); err != nil {
				t.Fatal(err)
			}
			evaluated, err := toGo(m.evaluate(t, c.inputs(t)).locals["queue_config"])
			if err != nil {
				t.Fatal(err)
			}
			if a, b := normalize(t, rendered), normalize(t, evaluated); !reflect.DeepEqual(a, b) {
				t.Errorf("terraform rendered\n%v\nthe HCL evaluation gives\n%v", a, b)
			}
		})
	}
}

// renderTests generates a test file that, per lane case, applies the module
// with the case's variables (every queue's URL and ARN overridden with its
// own) and writes queue_config to renderDir/<case>.yaml with tests/writer.
func renderTests(t *testing.T, renderDir string) []byte {
	t.Helper()
	var b strings.Builder
	b.WriteString("# Generated by terraform/moduletest (TestTerraform).\n\n")
	b.WriteString("mock_provider \"aws\" {\n  source = \"./tests/mocks\"\n}\n")
	lit := func(v cty.Value) string { return string(hclwrite.TokensForValue(v).Bytes()) }
	for _, c := range lanesCases {
		fmt.Fprintf(&b, "\nrun %q {\n  variables {\n", "render_"+c.name)
		in := c.inputs(t)
		for _, k := range slices.Sorted(maps.Keys(in)) {
			fmt.Fprintf(&b, "    %s = %s\n", k, lit(in[k]))
		}
		b.WriteString("  }\n")
		for _, q := range c.topo.WithDefaults().Queues() {
			target := fmt.Sprintf("aws_sqs_queue.queue[%q]", q.Spec.Name)
			if q.Kind == topology.KindDLQ {
				target = fmt.Sprintf("aws_sqs_queue.dlq[%q]", q.Lane)
			}
			fmt.Fprintf(&b, "  override_resource {\n    target = %s\n    values = { url = %q, arn = %q }\n  }\n", target, fakeQueueURL(q.Spec.Name), fakeQueueARN(q.Spec.Name))
		}
		b.WriteString("}\n")
		fmt.Fprintf(&b, "\nrun %q {\n  module {\n    source = \"./tests/writer\"\n  }\n  variables {\n", "write_"+c.name)
		fmt.Fprintf(&b, "    render_dir = %s\n    name = %q\n    content = run.render_%s.queue_config\n  }\n}\n", lit(cty.StringVal(renderDir)), c.name, c.name)
	}
	return []byte(b.String())
}

// normalize round-trips a value through JSON so numbers compare alike.
func normalize(t *testing.T, v any) any {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRedriveOrder checks the order in which an apply sets up the redrive.
// SQS lets a queue name a DLQ in its RedrivePolicy only if the DLQ's
// RedriveAllowPolicy admits it, and the module's DLQs admit their lane's
// queues by ARN (byQueue). So whatever sets a queue's redrive_policy must
// come after the DLQ's allow policy, which lists the queues and so comes
// after them. Set inline on the queue, the redrive of every shard added to
// an existing lane would be refused: the queue is created with it before
// the DLQ's list names the queue.
func TestRedriveOrder(t *testing.T) {
	t.Parallel()
	env := tools(t)
	const (
		queues = "aws_sqs_queue.queue"
		allow  = "aws_sqs_queue_redrive_allow_policy.dlq"
	)
	// The resources that set a redrive_policy, from the module's source.
	var setters []string
	for addr, b := range parseModule(t, moduleDir()).resources {
		if _, ok := b.Body.Attributes["redrive_policy"]; ok {
			setters = append(setters, addr)
		}
	}
	slices.Sort(setters)
	if len(setters) == 0 {
		t.Fatal("no resource of the module sets a redrive_policy")
	}

	// Terraform applies a resource after everything it depends on.
	t.Run("graph", func(t *testing.T) {
		t.Parallel()
		dir := copyModule(t)
		env.initDir(t, dir)
		out := env.tf(t, dir, "graph", "-no-color")
		deps := map[string][]string{}
		for _, m := range regexp.MustCompile(`(?m)^\s*"([^"]+)" -> "([^"]+)"`).FindAllStringSubmatch(out, -1) {
			deps[m[1]] = append(deps[m[1]], m[2])
		}
		dependsOn := func(from, to string) bool {
			seen := map[string]bool{}
			stack := []string{from}
			for len(stack) > 0 {
				n := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				for _, d := range deps[n] {
					if d == to {
						return true
					}
					if !seen[d] {
						seen[d] = true
						stack = append(stack, d)
					}
				}
			}
			return false
		}
		if !dependsOn(allow, queues) {
			t.Errorf("%s does not depend on %s: it must list queues that exist\n%s", allow, queues, out)
		}
		for _, s := range setters {
			if !dependsOn(s, allow) {
				t.Errorf("%s sets redrive_policy without depending on %s: SQS refuses a redrive to a DLQ whose byQueue list does not name the queue yet (a shard added to a lane)\n%s", s, allow, out)
			}
		}
	})

	// The apply that adds a shard to a lane, with the mock provider: the new
	// queue, then the DLQ's allow list with it, then its redrive. Read from
	// the order Terraform visits the instances in ("starting visit" and
	// "visit complete" in its TRACE log).
	t.Run("add_shard", func(t *testing.T) {
		t.Parallel()
		dir := copyModule(t)
		const test = "tests/redrive_order_generated.tftest.hcl"
		gen := "# Generated by terraform/moduletest (TestRedriveOrder).\n\n" +
			"mock_provider \"aws\" {\n  source = \"./tests/mocks\"\n}\n\n" +
			"run \"two_shards\" {\n  variables {\n    lanes = [{ name = \"grow\", shards = 2 }]\n  }\n}\n\n" +
			"run \"add_shard\" {\n  variables {\n    lanes = [{ name = \"grow\", shards = 3 }]\n  }\n}\n"
		if err := os.WriteFile(filepath.Join(dir, test), []byte(gen), 0o644); err != nil {
			t.Fatal(err)
		}
		env.initDir(t, dir)
		logPath := filepath.Join(t.TempDir(), "trace.log")
		out, err := env.runEnv(t, dir, []string{"TF_LOG=trace", "TF_LOG_PATH=" + logPath}, env.terraform, "test", "-no-color", "-filter="+test)
		if err != nil || !strings.Contains(out, "Success! 2 passed, 0 failed") {
			t.Fatalf("terraform test: %v\n%s", err, out)
		}
		data, err := os.ReadFile(logPath)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(data), "\n")
		// find is the first line from `from` on where vertex addr starts its
		// apply (start) or completes a visit (!start), or -1.
		find := func(from int, addr string, start bool) int {
			want := "vertex " + strconv.Quote(addr) + ": visit complete"
			if start {
				want = "vertex " + strconv.Quote(addr) + ": starting visit (*terraform.NodeApplyableResourceInstance)"
			}
			for i := max(from, 0); i < len(lines); i++ {
				if strings.Contains(lines[i], want) {
					return i
				}
			}
			return -1
		}
		const shard = "sluice-grow-shard-02"
		newQueue := fmt.Sprintf("%s[%q]", queues, shard)
		allowGrow := fmt.Sprintf("%s[%q]", allow, "grow")
		// shard-02 exists from the second run only: its creation marks that
		// run's apply.
		qStart := find(0, newQueue, true)
		if qStart < 0 {
			t.Fatalf("the trace log has no apply of %s (has Terraform's TRACE format changed?)\n%s", newQueue, out)
		}
		qDone := find(qStart, newQueue, false)
		aStart := find(qStart, allowGrow, true)
		aDone := find(aStart, allowGrow, false)
		if qDone < 0 || aStart < 0 || aDone < 0 {
			t.Fatalf("the apply that adds %s: queue created at line %d, %s updated at lines %d–%d of %s", shard, qDone, allowGrow, aStart, aDone, logPath)
		}
		if qDone > aStart {
			t.Errorf("%s is updated (line %d) before %s exists (line %d)", allowGrow, aStart, newQueue, qDone)
		}
		for _, s := range setters {
			inst := fmt.Sprintf("%s[%q]", s, shard)
			sStart := find(qStart, inst, true)
			switch {
			case sStart < 0:
				t.Errorf("%s is not applied when the shard is added", inst)
			case sStart < aDone:
				t.Errorf("%s sets the new shard's redrive_policy (line %d) before %s admits the shard (line %d): SQS would refuse it", inst, sStart, allowGrow, aDone)
			}
		}
	})
}

package moduletest

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/ext/tryfunc"
	"github.com/hashicorp/hcl/v2/ext/typeexpr"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
	"github.com/zclconf/go-cty/cty/function"
	"github.com/zclconf/go-cty/cty/function/stdlib"
	ctyjson "github.com/zclconf/go-cty/cty/json"
)

// moduleDir is terraform/, the module's root.
func moduleDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(file))
}

// The values the evaluation gives data sources and computed attributes; the
// same as tests/mocks/aws.tfmock.hcl.
const (
	fakePartition = "aws"
	fakeRegion    = "eu-west-1"
	fakeAccount   = "123456789012"
)

func fakeQueueARN(name string) string {
	return fmt.Sprintf("arn:%s:sqs:%s:%s:%s", fakePartition, fakeRegion, fakeAccount, name)
}

func fakeQueueURL(name string) string {
	return fmt.Sprintf("https://sqs.%s.amazonaws.com/%s/%s", fakeRegion, fakeAccount, name)
}

func fakeAlarmARN(name string) string {
	return fmt.Sprintf("arn:%s:cloudwatch:%s:%s:alarm:%s", fakePartition, fakeRegion, fakeAccount, name)
}

// identity names the argument that identifies an instance of each resource
// type the module uses, and computed gives the attributes the provider would
// compute from it (what other expressions refer to).
var identity = map[string]struct {
	arg      string
	computed func(id string) map[string]cty.Value
}{
	"aws_sqs_queue": {"name", func(n string) map[string]cty.Value {
		return map[string]cty.Value{"arn": cty.StringVal(fakeQueueARN(n)), "url": cty.StringVal(fakeQueueURL(n)), "id": cty.StringVal(fakeQueueURL(n))}
	}},
	"aws_cloudwatch_metric_alarm": {"alarm_name", func(n string) map[string]cty.Value {
		return map[string]cty.Value{"arn": cty.StringVal(fakeAlarmARN(n))}
	}},
	"aws_cloudwatch_composite_alarm": {"alarm_name", func(n string) map[string]cty.Value {
		return map[string]cty.Value{"arn": cty.StringVal(fakeAlarmARN(n))}
	}},
	"aws_cloudwatch_dashboard": {"dashboard_name", func(n string) map[string]cty.Value {
		return map[string]cty.Value{"dashboard_arn": cty.StringVal("arn:aws:cloudwatch::" + fakeAccount + ":dashboard/" + n)}
	}},
	"aws_sqs_queue_redrive_allow_policy": {"queue_url", func(string) map[string]cty.Value { return nil }},
	"aws_sqs_queue_redrive_policy":       {"queue_url", func(string) map[string]cty.Value { return nil }},
}

// module is the module's configuration parsed with the HCL libraries.
type module struct {
	variables map[string]*hclsyntax.Block
	locals    map[string]hcl.Expression
	outputs   map[string]hcl.Expression
	resources map[string]*hclsyntax.Block // by "type.name"
	data      map[string]*hclsyntax.Block // by "type.name"
}

func parseModule(t *testing.T, dir string) *module {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.tf"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no .tf files in %s (%v)", dir, err)
	}
	m := &module{
		variables: map[string]*hclsyntax.Block{},
		locals:    map[string]hcl.Expression{},
		outputs:   map[string]hcl.Expression{},
		resources: map[string]*hclsyntax.Block{},
		data:      map[string]*hclsyntax.Block{},
	}
	p := hclparse.NewParser()
	for _, path := range paths {
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		f, diags := p.ParseHCL(src, path)
		if diags.HasErrors() {
			t.Fatalf("parse: %s", diags)
		}
		for _, b := range f.Body.(*hclsyntax.Body).Blocks {
			switch b.Type {
			case "variable":
				m.variables[b.Labels[0]] = b
			case "locals":
				for name, a := range b.Body.Attributes {
					if _, dup := m.locals[name]; dup {
						t.Fatalf("local %s declared twice", name)
					}
					m.locals[name] = a.Expr
				}
			case "output":
				m.outputs[b.Labels[0]] = b.Body.Attributes["value"].Expr
			case "resource":
				m.resources[b.Labels[0]+"."+b.Labels[1]] = b
			case "data":
				m.data[b.Labels[0]+"."+b.Labels[1]] = b
			}
		}
	}
	return m
}

// functions are Terraform's built-in functions the module uses, from cty's
// standard library (Terraform's own implementations wrap the same ones).
var functions = map[string]function.Function{
	"ceil": stdlib.CeilFunc, "chunklist": stdlib.ChunklistFunc, "concat": stdlib.ConcatFunc,
	"contains": stdlib.ContainsFunc, "distinct": stdlib.DistinctFunc, "flatten": stdlib.FlattenFunc,
	"floor": stdlib.FloorFunc, "format": stdlib.FormatFunc, "join": stdlib.JoinFunc,
	"jsondecode": stdlib.JSONDecodeFunc, "jsonencode": stdlib.JSONEncodeFunc, "keys": stdlib.KeysFunc,
	"length": lengthFunc, "lower": stdlib.LowerFunc, "max": stdlib.MaxFunc, "merge": stdlib.MergeFunc,
	"min": stdlib.MinFunc, "range": stdlib.RangeFunc, "regex": stdlib.RegexFunc, "slice": stdlib.SliceFunc,
	"sort": stdlib.SortFunc, "values": stdlib.ValuesFunc,
	"can": tryfunc.CanFunc, "try": tryfunc.TryFunc,
	"one": function.New(&function.Spec{
		Params: []function.Parameter{{Name: "list", Type: cty.DynamicPseudoType}},
		Type:   function.StaticReturnType(cty.DynamicPseudoType),
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			switch n := args[0].LengthInt(); n {
			case 0:
				return cty.NullVal(cty.DynamicPseudoType), nil
			case 1:
				return args[0].Index(cty.NumberIntVal(0)), nil
			default:
				return cty.NilVal, fmt.Errorf("one: %d elements", n)
			}
		},
	}),
}

// lengthFunc is Terraform's length: cty's for collections, and also the
// number of characters of a string or of attributes of an object.
var lengthFunc = function.New(&function.Spec{
	Params: []function.Parameter{{Name: "value", Type: cty.DynamicPseudoType, AllowDynamicType: true}},
	Type:   function.StaticReturnType(cty.Number),
	Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
		v := args[0]
		switch {
		case v.Type() == cty.String:
			return stdlib.Strlen(v)
		case v.Type().IsObjectType():
			return cty.NumberIntVal(int64(len(v.Type().AttributeTypes()))), nil
		}
		return stdlib.Length(v)
	},
})

// evaluation is the module evaluated for one set of input variables.
type evaluation struct {
	m         *module
	vars      map[string]cty.Value
	locals    map[string]cty.Value
	resources map[string]cty.Value // "type.name" → its reference value (object, tuple or single object)
	instances map[string]map[string]instanceScope
}

// instanceScope is what each.key/each.value or count.index are for one
// instance.
type instanceScope struct {
	each  *cty.Value // object {key, value}, for for_each
	count *cty.Value // object {index}, for count
}

// evaluate evaluates variables (inputs over defaults, with the type
// constraints' optional attribute defaults), then locals and resources in
// dependency order, as Terraform would.
func (m *module) evaluate(t *testing.T, inputs map[string]cty.Value) *evaluation {
	t.Helper()
	e := &evaluation{
		m: m, vars: map[string]cty.Value{}, locals: map[string]cty.Value{},
		resources: map[string]cty.Value{}, instances: map[string]map[string]instanceScope{},
	}
	for name := range inputs {
		if _, ok := m.variables[name]; !ok {
			t.Fatalf("input %q: the module has no such variable", name)
		}
	}
	for name, b := range m.variables {
		ty, defaults, diags := typeexpr.TypeConstraintWithDefaults(b.Body.Attributes["type"].Expr)
		if diags.HasErrors() {
			t.Fatalf("variable %s: %s", name, diags)
		}
		val, ok := inputs[name]
		if !ok {
			def, ok := b.Body.Attributes["default"]
			if !ok {
				t.Fatalf("variable %s has no default and no input", name)
			}
			if val, diags = def.Expr.Value(nil); diags.HasErrors() {
				t.Fatalf("variable %s default: %s", name, diags)
			}
		}
		if defaults != nil && !val.IsNull() {
			val = defaults.Apply(val)
		}
		val, err := convert.Convert(val, ty)
		if err != nil {
			t.Fatalf("variable %s: %v", name, err)
		}
		e.vars[name] = val
	}

	pendingLocals := slices.Sorted(maps.Keys(m.locals))
	pendingResources := slices.Sorted(maps.Keys(m.resources))
	for len(pendingLocals)+len(pendingResources) > 0 {
		progress := false
		var next []string
		for _, name := range pendingLocals {
			if !e.ready(m.locals[name]) {
				next = append(next, name)
				continue
			}
			v, diags := m.locals[name].Value(e.ctx(nil))
			if diags.HasErrors() {
				t.Fatalf("local.%s: %s", name, diags)
			}
			e.locals[name] = v
			progress = true
		}
		pendingLocals = next
		next = nil
		for _, addr := range pendingResources {
			ok, err := e.buildResource(addr)
			if err != nil {
				t.Fatalf("%s: %v", addr, err)
			}
			if !ok {
				next = append(next, addr)
				continue
			}
			progress = true
		}
		pendingResources = next
		if !progress {
			t.Fatalf("cannot evaluate locals %v and resources %v: their references never resolve", pendingLocals, pendingResources)
		}
	}
	return e
}

// ready reports whether everything exprs refer to is evaluated.
func (e *evaluation) ready(exprs ...hcl.Expression) bool {
	for _, expr := range exprs {
		if expr == nil {
			continue
		}
		for _, tr := range expr.Variables() {
			root := tr.RootName()
			switch root {
			case "var", "data", "each", "count":
				continue
			case "local":
				if _, ok := e.locals[attrName(tr)]; !ok {
					return false
				}
			default:
				if _, ok := e.resources[root+"."+attrName(tr)]; !ok {
					return false
				}
			}
		}
	}
	return true
}

func attrName(tr hcl.Traversal) string {
	if len(tr) < 2 {
		return ""
	}
	if a, ok := tr[1].(hcl.TraverseAttr); ok {
		return a.Name
	}
	return ""
}

// buildResource evaluates a resource's instances (for_each or count) and
// its identifying argument, and makes the value other expressions refer to,
// with the attributes the provider computes. It reports false when the
// resource's references are not evaluated yet.
func (e *evaluation) buildResource(addr string) (bool, error) {
	b := e.m.resources[addr]
	typ := b.Labels[0]
	id, ok := identity[typ]
	if !ok {
		return false, fmt.Errorf("resource type %s: the evaluation knows no identity for it", typ)
	}
	forEach, hasForEach := b.Body.Attributes["for_each"]
	count, hasCount := b.Body.Attributes["count"]
	idAttr, ok := b.Body.Attributes[id.arg]
	if !ok {
		return false, fmt.Errorf("no %s argument", id.arg)
	}
	var deps []hcl.Expression
	if hasForEach {
		deps = append(deps, forEach.Expr)
	}
	if hasCount {
		deps = append(deps, count.Expr)
	}
	if !e.ready(append(deps, idAttr.Expr)...) {
		return false, nil
	}
	scopes := map[string]instanceScope{}
	switch {
	case hasForEach:
		coll, diags := forEach.Expr.Value(e.ctx(nil))
		if diags.HasErrors() {
			return false, diags
		}
		for it := coll.ElementIterator(); it.Next(); {
			k, v := it.Element()
			each := cty.ObjectVal(map[string]cty.Value{"key": k, "value": v})
			scopes[k.AsString()] = instanceScope{each: &each}
		}
	case hasCount:
		n, diags := count.Expr.Value(e.ctx(nil))
		if diags.HasErrors() {
			return false, diags
		}
		c, _ := n.AsBigFloat().Int64()
		for i := range c {
			idx := cty.ObjectVal(map[string]cty.Value{"index": cty.NumberIntVal(i)})
			scopes[fmt.Sprint(i)] = instanceScope{count: &idx}
		}
	default:
		scopes[""] = instanceScope{}
	}
	objs := map[string]cty.Value{}
	for key, sc := range scopes {
		v, diags := idAttr.Expr.Value(e.ctx(&sc))
		if diags.HasErrors() {
			return false, diags
		}
		attrs := map[string]cty.Value{id.arg: v}
		for k, cv := range id.computed(v.AsString()) {
			attrs[k] = cv
		}
		objs[key] = cty.ObjectVal(attrs)
	}
	switch {
	case hasForEach:
		e.resources[addr] = cty.ObjectVal(objs)
	case hasCount:
		elems := make([]cty.Value, len(objs))
		for k, v := range objs {
			i, err := strconv.Atoi(k)
			if err != nil {
				return false, err
			}
			elems[i] = v
		}
		e.resources[addr] = cty.TupleVal(elems)
	default:
		e.resources[addr] = objs[""]
	}
	e.instances[addr] = scopes
	return true, nil
}

// ctx is the evaluation context: var, local, data, the resources built so
// far, and each/count for an instance.
func (e *evaluation) ctx(sc *instanceScope) *hcl.EvalContext {
	vars := map[string]cty.Value{
		"var":   cty.ObjectVal(e.vars),
		"local": cty.ObjectVal(e.locals),
		"data": cty.ObjectVal(map[string]cty.Value{
			"aws_partition":       cty.ObjectVal(map[string]cty.Value{"current": cty.ObjectVal(map[string]cty.Value{"partition": cty.StringVal(fakePartition)})}),
			"aws_region":          cty.ObjectVal(map[string]cty.Value{"current": cty.ObjectVal(map[string]cty.Value{"region": cty.StringVal(fakeRegion)})}),
			"aws_caller_identity": cty.ObjectVal(map[string]cty.Value{"current": cty.ObjectVal(map[string]cty.Value{"account_id": cty.StringVal(fakeAccount)})}),
		}),
	}
	byType := map[string]map[string]cty.Value{}
	for addr, v := range e.resources {
		typ, name, _ := strings.Cut(addr, ".")
		if byType[typ] == nil {
			byType[typ] = map[string]cty.Value{}
		}
		byType[typ][name] = v
	}
	for typ, m := range byType {
		vars[typ] = cty.ObjectVal(m)
	}
	if sc != nil && sc.each != nil {
		vars["each"] = *sc.each
	}
	if sc != nil && sc.count != nil {
		vars["count"] = *sc.count
	}
	return &hcl.EvalContext{Variables: vars, Functions: functions}
}

// output evaluates an output's value.
func (e *evaluation) output(t *testing.T, name string) cty.Value {
	t.Helper()
	expr, ok := e.m.outputs[name]
	if !ok {
		t.Fatalf("no output %q", name)
	}
	v, diags := expr.Value(e.ctx(nil))
	if diags.HasErrors() {
		t.Fatalf("output %s: %s", name, diags)
	}
	return v
}

// instancesOf evaluates every argument and nested block (dynamic blocks
// expanded) of each instance of a resource and decodes them, by instance
// key, into values of type T via JSON.
func instancesOf[T any](t *testing.T, e *evaluation, addr string) map[string]T {
	t.Helper()
	b, ok := e.m.resources[addr]
	if !ok {
		t.Fatalf("no resource %s", addr)
	}
	out := map[string]T{}
	for key, sc := range e.instances[addr] {
		obj, err := e.decodeBody(b.Body, e.ctx(&sc))
		if err != nil {
			t.Fatalf("%s[%q]: %v", addr, key, err)
		}
		data, err := json.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		var v T
		if err := json.Unmarshal(data, &v); err != nil {
			t.Fatalf("%s[%q]: %v", addr, key, err)
		}
		out[key] = v
	}
	return out
}

var metaArguments = map[string]bool{"for_each": true, "count": true, "depends_on": true, "provider": true}

// decodeBody evaluates a block body into a JSON-able map: arguments by
// name, nested blocks as lists by type.
func (e *evaluation) decodeBody(body *hclsyntax.Body, ctx *hcl.EvalContext) (map[string]any, error) {
	out := map[string]any{}
	for name, a := range body.Attributes {
		if metaArguments[name] {
			continue
		}
		v, diags := a.Expr.Value(ctx)
		if diags.HasErrors() {
			return nil, fmt.Errorf("%s: %w", name, diags)
		}
		g, err := toGo(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out[name] = g
	}
	blocks := map[string][]any{}
	for _, b := range body.Blocks {
		switch b.Type {
		case "lifecycle", "provisioner", "connection":
			continue
		case "dynamic":
			typ := b.Labels[0]
			iter := typ
			if it, ok := b.Body.Attributes["iterator"]; ok {
				iter = hcl.ExprAsKeyword(it.Expr)
			}
			coll, diags := b.Body.Attributes["for_each"].Expr.Value(ctx)
			if diags.HasErrors() {
				return nil, fmt.Errorf("dynamic %s: %w", typ, diags)
			}
			var content *hclsyntax.Block
			for _, c := range b.Body.Blocks {
				if c.Type == "content" {
					content = c
				}
			}
			if content == nil {
				return nil, fmt.Errorf("dynamic %s: no content block", typ)
			}
			for it := coll.ElementIterator(); it.Next(); {
				k, v := it.Element()
				child := ctx.NewChild()
				child.Variables = map[string]cty.Value{iter: cty.ObjectVal(map[string]cty.Value{"key": k, "value": v})}
				obj, err := e.decodeBody(content.Body, child)
				if err != nil {
					return nil, fmt.Errorf("dynamic %s: %w", typ, err)
				}
				blocks[typ] = append(blocks[typ], obj)
			}
		default:
			obj, err := e.decodeBody(b.Body, ctx)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", b.Type, err)
			}
			blocks[b.Type] = append(blocks[b.Type], obj)
		}
	}
	for typ, list := range blocks {
		out[typ] = list
	}
	return out, nil
}

// toGo converts a known cty value to plain Go values through JSON.
func toGo(v cty.Value) (any, error) {
	if !v.IsWhollyKnown() {
		return nil, fmt.Errorf("value is not known: %#v", v)
	}
	data, err := ctyjson.SimpleJSONValue{Value: v}.MarshalJSON()
	if err != nil {
		return nil, err
	}
	var out any
	err = json.Unmarshal(data, &out)
	return out, err
}

// decode converts a cty value to T through JSON.
func decode[T any](t *testing.T, v cty.Value) T {
	t.Helper()
	g, err := toGo(v)
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(g)
	if err != nil {
		t.Fatal(err)
	}
	var out T
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatalf("decode %s: %v", data, err)
	}
	return out
}

func sortedCopy(s []string) []string {
	c := slices.Clone(s)
	sort.Strings(c)
	return c
}

// Package cdktf reads provider schemas out of a prebuilt CDK for Terraform
// provider package such as @cdktf/provider-aws.
//
// cdktf generates those packages from the provider's own schema (`terraform
// providers schema -json`), one lib/<name>/index.js per resource and data
// source. Each index.js carries, in its inline source map, the TypeScript it
// was compiled from, and that source records everything a schema needs:
//
//   - every member of a resource, data source or nested object class is
//     preceded by a comment "// <name> - computed: B, optional: B,
//     required: B";
//   - synthesizeHclAttributes (the main class) and the <struct>ToHclTerraform
//     functions (nested objects) list each configurable member with isBlock,
//     its kind (simple, list, set, map, struct) and its storage class type
//     (string, number, boolean, stringList, …, or a nested struct's name);
//   - computed-only members have typed getters (getStringAttribute('arn'),
//     cdktf.Fn.tolist(this.getListAttribute('x')) for a set, …) or a
//     ComplexList of a nested object;
//   - the package.json records the provider and version it was generated
//     from (cdktf.provider).
//
// The parser reads those patterns and nothing else; anything it does not
// recognise is an error naming the member, so a new pattern fails loudly
// rather than producing a wrong schema.
package cdktf

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/sluice-dev/sluice/terraform/test/schemaprovider/tfschema"
)

// Package is an unpacked cdktf provider package.
type Package struct {
	Dir             string // package root (holds package.json and lib/)
	Name            string // npm name, e.g. "@cdktf/provider-aws"
	Version         string // npm version
	Provider        string // provider source, e.g. "registry.terraform.io/hashicorp/aws"
	ProviderVersion string // provider version the package was generated from

	index map[string]string // "resource:aws_x" / "data:aws_x" → lib dir, built on demand
}

// Open reads the package's package.json.
func Open(dir string) (*Package, error) {
	data, err := os.ReadFile(filepath.Join(dir, "package.json"))
	if err != nil {
		return nil, fmt.Errorf("cdktf package: %w", err)
	}
	var pj struct {
		Name    string `json:"name"`
		Version string `json:"version"`
		CDKTF   struct {
			Provider struct {
				Name    string `json:"name"`
				Version string `json:"version"`
			} `json:"provider"`
		} `json:"cdktf"`
	}
	if err := json.Unmarshal(data, &pj); err != nil {
		return nil, fmt.Errorf("cdktf package %s: package.json: %w", dir, err)
	}
	if pj.CDKTF.Provider.Name == "" || pj.CDKTF.Provider.Version == "" {
		return nil, fmt.Errorf("cdktf package %s: package.json has no cdktf.provider name and version", dir)
	}
	return &Package{
		Dir: dir, Name: pj.Name, Version: pj.Version,
		Provider: pj.CDKTF.Provider.Name, ProviderVersion: pj.CDKTF.Provider.Version,
	}, nil
}

// Kinds of top-level schema.
const (
	kindResource   = "resource"
	kindDataSource = "data"
	kindProvider   = "provider"
)

var baseClass = map[string]string{
	kindResource:   "cdktf.TerraformResource",
	kindDataSource: "cdktf.TerraformDataSource",
	kindProvider:   "cdktf.TerraformProvider",
}

// Resource returns the schema of a managed resource type, e.g.
// "aws_sqs_queue".
func (p *Package) Resource(typ string) (*tfschema.Block, error) {
	return p.schema(kindResource, typ)
}

// DataSource returns the schema of a data source type, e.g. "aws_region".
func (p *Package) DataSource(typ string) (*tfschema.Block, error) {
	return p.schema(kindDataSource, typ)
}

// ProviderConfig returns the schema of the provider block (without the
// alias meta-argument, which cdktf lists among the provider's members).
func (p *Package) ProviderConfig() (*tfschema.Block, error) {
	b, err := p.schemaFrom(kindProvider, filepath.Join(p.Dir, "lib", "provider"), p.providerType())
	if err != nil {
		return nil, err
	}
	delete(b.Attributes, "alias")
	return b, nil
}

// providerType is the provider's local name: "aws" for …/hashicorp/aws.
func (p *Package) providerType() string {
	return p.Provider[strings.LastIndex(p.Provider, "/")+1:]
}

func (p *Package) schema(kind, typ string) (*tfschema.Block, error) {
	dir, err := p.libDir(kind, typ)
	if err != nil {
		return nil, err
	}
	return p.schemaFrom(kind, dir, typ)
}

func (p *Package) schemaFrom(kind, dir, typ string) (*tfschema.Block, error) {
	src, err := typeScriptSource(filepath.Join(dir, "index.js"))
	if err != nil {
		return nil, err
	}
	f := parseFile(src)
	b, err := f.mainBlock(kind, typ)
	if err != nil {
		return nil, fmt.Errorf("%s %s (%s): %w", kind, typ, filepath.Base(dir), err)
	}
	return b, nil
}

// libDir finds the lib/ directory of a type: first by cdktf's naming
// (aws_sqs_queue → lib/sqs-queue, data aws_region → lib/data-aws-region),
// checked against the declared type, then by scanning every index.d.ts.
func (p *Package) libDir(kind, typ string) (string, error) {
	guess := strings.ReplaceAll(strings.TrimPrefix(typ, p.providerType()+"_"), "_", "-")
	if kind == kindDataSource {
		guess = "data-" + strings.ReplaceAll(typ, "_", "-")
	}
	dir := filepath.Join(p.Dir, "lib", guess)
	if k, t, ok := declared(dir); ok && k == kind && t == typ {
		return dir, nil
	}
	if p.index == nil {
		p.index = map[string]string{}
		dirs, err := filepath.Glob(filepath.Join(p.Dir, "lib", "*"))
		if err != nil {
			return "", fmt.Errorf("cdktf package: %w", err)
		}
		for _, d := range dirs {
			if k, t, ok := declared(d); ok {
				p.index[k+":"+t] = d
			}
		}
	}
	if d, ok := p.index[kind+":"+typ]; ok {
		return d, nil
	}
	return "", fmt.Errorf("%s %q: not in %s %s (provider %s %s)", kind, typ, p.Name, p.Version, p.Provider, p.ProviderVersion)
}

var declRE = regexp.MustCompile(`export declare class \w+ extends (cdktf\.Terraform\w+) \{\s*static readonly tfResourceType = "(\w+)";`)

// declared reports the kind and type a lib directory declares.
func declared(dir string) (kind, typ string, ok bool) {
	data, err := os.ReadFile(filepath.Join(dir, "index.d.ts"))
	if err != nil {
		return "", "", false
	}
	m := declRE.FindSubmatch(data)
	if m == nil {
		return "", "", false
	}
	for k, base := range baseClass {
		if string(m[1]) == base {
			return k, string(m[2]), true
		}
	}
	return "", "", false
}

const sourceMapPrefix = "//# sourceMappingURL=data:application/json;base64,"

// typeScriptSource returns the TypeScript source embedded in a compiled
// file's inline source map.
func typeScriptSource(jsPath string) (string, error) {
	data, err := os.ReadFile(jsPath)
	if err != nil {
		return "", fmt.Errorf("cdktf package: %w", err)
	}
	i := strings.LastIndex(string(data), sourceMapPrefix)
	if i < 0 {
		return "", fmt.Errorf("%s: no inline source map", jsPath)
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(data[i+len(sourceMapPrefix):])))
	if err != nil {
		return "", fmt.Errorf("%s: source map: %w", jsPath, err)
	}
	var sm struct {
		SourcesContent []string `json:"sourcesContent"`
	}
	if err := json.Unmarshal(raw, &sm); err != nil {
		return "", fmt.Errorf("%s: source map: %w", jsPath, err)
	}
	if len(sm.SourcesContent) != 1 {
		return "", fmt.Errorf("%s: source map holds %d sources, want 1", jsPath, len(sm.SourcesContent))
	}
	return sm.SourcesContent[0], nil
}

// file is one parsed TypeScript source.
type file struct {
	classes     map[string]*class            // by class name
	descriptors map[string][]descriptor      // struct name → its ToHclTerraform entries
	optional    map[string]map[string]bool   // interface → camelCase member → optional
	camelToTF   map[string]map[string]string // struct name → camelCase → schema name (from ToTerraform)
}

type class struct {
	name, base string
	tfType     string       // tfResourceType, for main classes
	members    []member     // in source order
	hcl        []descriptor // synthesizeHclAttributes entries (main classes)
	camelToTF  map[string]string
}

// member is one "// name - computed: …" entry of a class.
type member struct {
	name                         string
	computed, optional, required bool
	complex                      string // class of a nested object member (…OutputReference, …List, …Map)
	wrapsSet                     bool   // a …List that holds a set
	getter                       string // String, Number, Boolean, List, NumberList, StringMap, …
	toList                       bool   // getter wrapped in cdktf.Fn.tolist: a set
	dynamic                      bool   // interpolationForAttribute
}

// descriptor is one synthesizeHclAttributes / ToHclTerraform entry.
type descriptor struct {
	name    string
	isBlock bool
	kind    string // simple, list, set, map, struct
	storage string // string, number, boolean, stringList, …, or a struct name (+List/Map)
}

var (
	declStartRE = regexp.MustCompile(`(?m)^export (class|function|interface) (\w+)`)
	classHeadRE = regexp.MustCompile(`^export class (\w+) extends ([\w.]+)`)
	tfTypeRE    = regexp.MustCompile(`public static readonly tfResourceType = "(\w+)";`)
	memberRE    = regexp.MustCompile(`(?m)^\s*// (\w+) - computed: (true|false), optional: (true|false), required: (true|false)\s*$`)
	complexRE   = regexp.MustCompile(`private _\w+ = new ((?:cdktf\.)?\w+)\(this, "(\w+)"(?:, (true|false))?\);`)
	getterRE    = regexp.MustCompile(`return (?:cdktf\.Token\.as\w+\()?(cdktf\.Fn\.tolist\()?this\.get(\w*)Attribute\('(\w+)'\)`)
	interpRE    = regexp.MustCompile(`return this\.interpolationForAttribute\('(\w+)'\)`)
	descRE      = regexp.MustCompile(`(\w+): \{\s*value: [^\n]*\n\s*isBlock: (true|false),\s*type: "(\w+)",\s*storageClassType: "(\w+)",\s*\}`)
	hclFuncRE   = regexp.MustCompile(`^export function \w+ToHclTerraform\(struct\?: (\w+)\b`)
	tfFuncRE    = regexp.MustCompile(`^export function \w+ToTerraform\(struct\?: (\w+)\b`)
	structRefRE = regexp.MustCompile(`(?m)^\s*(\w+): .*struct!\.(\w+)\b`)
	thisRefRE   = regexp.MustCompile(`(?m)^\s*(\w+): .*this\._(\w+)\b`)
	ifaceRE     = regexp.MustCompile(`^export interface (\w+)`)
	readonlyRE  = regexp.MustCompile(`(?m)^\s*readonly (\w+)(\??):`)
)

func parseFile(src string) *file {
	f := &file{
		classes:     map[string]*class{},
		descriptors: map[string][]descriptor{},
		optional:    map[string]map[string]bool{},
		camelToTF:   map[string]map[string]string{},
	}
	starts := declStartRE.FindAllStringIndex(src, -1)
	for i, s := range starts {
		end := len(src)
		if i+1 < len(starts) {
			end = starts[i+1][0]
		}
		chunk := src[s[0]:end]
		switch {
		case classHeadRE.MatchString(chunk):
			f.parseClass(chunk)
		case hclFuncRE.MatchString(chunk):
			name := strings.TrimSuffix(hclFuncRE.FindStringSubmatch(chunk)[1], "OutputReference")
			f.descriptors[name] = parseDescriptors(chunk)
		case tfFuncRE.MatchString(chunk):
			name := strings.TrimSuffix(tfFuncRE.FindStringSubmatch(chunk)[1], "OutputReference")
			f.camelToTF[name] = pairs(structRefRE, chunk)
		case ifaceRE.MatchString(chunk):
			name := ifaceRE.FindStringSubmatch(chunk)[1]
			opt := map[string]bool{}
			for _, m := range readonlyRE.FindAllStringSubmatch(chunk, -1) {
				opt[m[1]] = m[2] == "?"
			}
			f.optional[name] = opt
		}
	}
	return f
}

// pairs maps camelCase to schema names from "schema_name: …(struct!.camel)"
// or "schema_name: …(this._camel)" lines.
func pairs(re *regexp.Regexp, chunk string) map[string]string {
	out := map[string]string{}
	for _, m := range re.FindAllStringSubmatch(chunk, -1) {
		out[m[2]] = m[1]
	}
	return out
}

func parseDescriptors(chunk string) []descriptor {
	var out []descriptor
	for _, m := range descRE.FindAllStringSubmatch(chunk, -1) {
		out = append(out, descriptor{name: m[1], isBlock: m[2] == "true", kind: m[3], storage: m[4]})
	}
	return out
}

func (f *file) parseClass(chunk string) {
	head := classHeadRE.FindStringSubmatch(chunk)
	c := &class{name: head[1], base: head[2]}
	if m := tfTypeRE.FindStringSubmatch(chunk); m != nil {
		c.tfType = m[1]
	}
	locs := memberRE.FindAllStringSubmatchIndex(chunk, -1)
	for i, loc := range locs {
		end := len(chunk)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		body := chunk[loc[1]:end]
		m := member{
			name:     chunk[loc[2]:loc[3]],
			computed: chunk[loc[4]:loc[5]] == "true",
			optional: chunk[loc[6]:loc[7]] == "true",
			required: chunk[loc[8]:loc[9]] == "true",
		}
		// Only the member's own declaration and getter count: they come
		// first, before the next "public get" of another member.
		if cm := complexRE.FindStringSubmatchIndex(body); cm != nil && !strings.Contains(body[:cm[0]], "public get") {
			m.complex = body[cm[2]:cm[3]]
			if cm[6] >= 0 {
				m.wrapsSet = body[cm[6]:cm[7]] == "true"
			}
		} else if gm := getterRE.FindStringSubmatch(body); gm != nil && gm[3] == m.name {
			m.getter = gm[2]
			m.toList = gm[1] != ""
		} else if im := interpRE.FindStringSubmatch(body); im != nil && im[1] == m.name {
			m.dynamic = true
		}
		c.members = append(c.members, m)
	}
	if i := strings.Index(chunk, "synthesizeHclAttributes()"); i >= 0 {
		c.hcl = parseDescriptors(chunk[i:])
	}
	if i := strings.Index(chunk, "synthesizeAttributes()"); i >= 0 {
		c.camelToTF = pairs(thisRefRE, chunk[i:])
	}
	f.classes[c.name] = c
}

// mainBlock returns the schema of the class that declares typ.
func (f *file) mainBlock(kind, typ string) (*tfschema.Block, error) {
	for _, c := range f.classes {
		if c.base == baseClass[kind] && c.tfType == typ {
			return f.block(c.members, c.hcl, f.optional[c.name+"Config"], c.camelToTF, 0)
		}
	}
	return nil, errors.New("no class declares this type")
}

// maxDepth bounds nesting (the deepest AWS schemas nest about 8 levels).
const maxDepth = 32

// structBlock returns the schema of nested struct name.
func (f *file) structBlock(name string, depth int) (*tfschema.Block, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("%s: nested more than %d levels", name, maxDepth)
	}
	var members []member
	if c, ok := f.classes[name+"OutputReference"]; ok {
		members = c.members
	}
	descs, hasDescs := f.descriptors[name]
	if members == nil && !hasDescs {
		return nil, fmt.Errorf("nested type %s: neither %sOutputReference nor a ToHclTerraform function found", name, name)
	}
	return f.block(members, descs, f.optional[name], f.camelToTF[name], depth)
}

// block builds a schema block from a class's members (flags and getters),
// the configurable entries (descriptors) and, where members carry no flags
// (provider blocks), the TypeScript interface's optional markers.
func (f *file) block(members []member, descs []descriptor, optional map[string]bool, camelToTF map[string]string, depth int) (*tfschema.Block, error) {
	b := &tfschema.Block{Attributes: map[string]*tfschema.Attribute{}, BlockTypes: map[string]*tfschema.BlockType{}}
	byName := map[string]member{}
	for _, m := range members {
		byName[m.name] = m
	}
	tfToCamel := map[string]string{}
	for camel, tf := range camelToTF {
		tfToCamel[tf] = camel
	}
	flags := func(name string) (computed, opt, req bool, err error) {
		if m, ok := byName[name]; ok {
			return m.computed, m.optional, m.required, nil
		}
		camel, ok := tfToCamel[name]
		if !ok {
			return false, false, false, fmt.Errorf("%s: no flags comment and no ToTerraform mapping", name)
		}
		o, ok := optional[camel]
		if !ok {
			return false, false, false, fmt.Errorf("%s: interface member %s not found", name, camel)
		}
		return false, o, !o, nil
	}
	seen := map[string]bool{}
	for _, d := range descs {
		seen[d.name] = true
		computed, opt, req, err := flags(d.name)
		if err != nil {
			return nil, err
		}
		if d.isBlock {
			single := strings.HasSuffix(byName[d.name].complex, "OutputReference")
			bt, err := f.blockType(d, req, single, depth)
			if err != nil {
				return nil, err
			}
			b.BlockTypes[d.name] = bt
			continue
		}
		typ, err := f.descriptorType(d, depth)
		if err != nil {
			return nil, err
		}
		b.Attributes[d.name] = &tfschema.Attribute{Type: typ, Computed: computed, Optional: opt, Required: req}
	}
	for _, m := range members {
		if seen[m.name] {
			continue
		}
		if m.optional || m.required {
			return nil, fmt.Errorf("%s: configurable member without a ToHclTerraform entry", m.name)
		}
		typ, err := f.memberType(m, depth)
		if err != nil {
			return nil, err
		}
		b.Attributes[m.name] = &tfschema.Attribute{Type: typ, Computed: true}
	}
	return b, nil
}

// blockType is the nested block type of a descriptor with isBlock.
func (f *file) blockType(d descriptor, required, single bool, depth int) (*tfschema.BlockType, error) {
	nested, err := f.structBlock(structName(d.storage), depth+1)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", d.name, err)
	}
	bt := &tfschema.BlockType{Block: nested}
	switch d.kind {
	case "struct": // a single nested block (the SDK's timeouts, the framework's SingleNestedBlock)
		bt.NestingMode = tfschema.NestingSingle
	case "list":
		bt.NestingMode = tfschema.NestingList
	case "set":
		bt.NestingMode = tfschema.NestingSet
	default:
		return nil, fmt.Errorf("%s: block of kind %q is not supported", d.name, d.kind)
	}
	if bt.NestingMode != tfschema.NestingSingle {
		// A list or set block of at most one item is an …OutputReference
		// member (a getter of one object), not a …List.
		if single {
			bt.MaxItems = 1
		}
		if required {
			bt.MinItems = 1
		}
	}
	return bt, nil
}

// structName strips the List/Map suffix cdktf gives collections of struct.
func structName(storage string) string {
	for _, s := range []string{"List", "Map"} {
		if n, ok := strings.CutSuffix(storage, s); ok && n != "" && !isPrimitive(n) {
			return n
		}
	}
	return storage
}

var primitives = map[string]string{"string": "string", "number": "number", "boolean": "bool"}

func isPrimitive(s string) bool { _, ok := primitives[s]; return ok }

// prim is the cty type of a storage class of primitives: string, number,
// boolean, or a list or map of them (stringList, numberMap, …; a list
// storage class also stands for a set).
func prim(s string) (any, bool) {
	if p, ok := primitives[s]; ok {
		return p, true
	}
	for suffix, kind := range map[string]string{"List": "list", "Map": "map"} {
		if p, ok := primitives[strings.TrimSuffix(s, suffix)]; ok && strings.HasSuffix(s, suffix) {
			return []any{kind, p}, true
		}
	}
	return nil, false
}

// descriptorType is the cty type (JSON) of a configurable attribute.
func (f *file) descriptorType(d descriptor, depth int) (json.RawMessage, error) {
	switch d.kind {
	case "simple":
		if p, ok := prim(d.storage); ok {
			return jsonType(p), nil
		}
		if d.storage == "any" {
			return jsonType("dynamic"), nil
		}
	case "list", "set":
		if p, ok := prim(strings.TrimSuffix(d.storage, "List")); ok {
			return jsonType([]any{d.kind, p}), nil
		}
		obj, err := f.objectType(structName(d.storage), depth)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", d.name, err)
		}
		return jsonType([]any{d.kind, obj}), nil
	case "map":
		if p, ok := prim(strings.TrimSuffix(d.storage, "Map")); ok {
			return jsonType([]any{"map", p}), nil
		}
		obj, err := f.objectType(structName(d.storage), depth)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", d.name, err)
		}
		return jsonType([]any{"map", obj}), nil
	case "struct":
		obj, err := f.objectType(d.storage, depth)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", d.name, err)
		}
		return jsonType(obj), nil
	}
	return nil, fmt.Errorf("%s: attribute of kind %q, storage %q is not supported", d.name, d.kind, d.storage)
}

// memberType is the cty type (JSON) of a computed-only member.
func (f *file) memberType(m member, depth int) (json.RawMessage, error) {
	switch {
	case strings.HasPrefix(m.complex, "cdktf."):
		// cdktf's own collections of computed primitives.
		t, ok := map[string]any{
			"cdktf.StringMap":  []any{"map", "string"},
			"cdktf.NumberMap":  []any{"map", "number"},
			"cdktf.BooleanMap": []any{"map", "bool"},
			"cdktf.AnyMap":     []any{"map", "dynamic"},
		}[m.complex]
		if !ok {
			return nil, fmt.Errorf("%s: %s is not supported", m.name, m.complex)
		}
		return jsonType(t), nil
	case m.complex != "":
		switch {
		case strings.HasSuffix(m.complex, "OutputReference"):
			obj, err := f.objectType(strings.TrimSuffix(m.complex, "OutputReference"), depth)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", m.name, err)
			}
			return jsonType(obj), nil
		case strings.HasSuffix(m.complex, "List"):
			obj, err := f.objectType(strings.TrimSuffix(m.complex, "List"), depth)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", m.name, err)
			}
			kind := "list"
			if m.wrapsSet {
				kind = "set"
			}
			return jsonType([]any{kind, obj}), nil
		case strings.HasSuffix(m.complex, "Map"):
			obj, err := f.objectType(strings.TrimSuffix(m.complex, "Map"), depth)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", m.name, err)
			}
			return jsonType([]any{"map", obj}), nil
		}
	case m.dynamic:
		return jsonType("dynamic"), nil
	case m.getter != "":
		var t any
		switch m.getter {
		case "String":
			t = "string"
		case "Number":
			t = "number"
		case "Boolean":
			t = "bool"
		case "List":
			t = []any{"list", "string"}
		case "NumberList":
			t = []any{"list", "number"}
		case "StringMap":
			t = []any{"map", "string"}
		case "NumberMap":
			t = []any{"map", "number"}
		case "BooleanMap":
			t = []any{"map", "bool"}
		case "AnyMap":
			t = []any{"map", "dynamic"}
		default:
			return nil, fmt.Errorf("%s: getter get%sAttribute is not supported", m.name, m.getter)
		}
		if l, ok := t.([]any); ok && m.toList && l[0] == "list" {
			l[0] = "set"
		}
		return jsonType(t), nil
	}
	return nil, fmt.Errorf("%s: no type found (complex %q, getter %q)", m.name, m.complex, m.getter)
}

// objectType is the cty object type of nested struct name: nested blocks
// inside an attribute become attributes of list or set of object.
func (f *file) objectType(name string, depth int) (any, error) {
	b, err := f.structBlock(name, depth+1)
	if err != nil {
		return nil, err
	}
	return blockObject(b), nil
}

func blockObject(b *tfschema.Block) any {
	attrs := map[string]any{}
	for n, a := range b.Attributes {
		var t any
		_ = json.Unmarshal(a.Type, &t)
		attrs[n] = t
	}
	for n, bt := range b.BlockTypes {
		obj := blockObject(bt.Block)
		switch bt.NestingMode {
		case tfschema.NestingSingle:
			attrs[n] = obj
		default:
			attrs[n] = []any{bt.NestingMode, obj}
		}
	}
	return []any{"object", attrs}
}

func jsonType(t any) json.RawMessage {
	data, err := json.Marshal(t)
	if err != nil {
		panic(err) // only strings, slices and maps of them
	}
	return data
}

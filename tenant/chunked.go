package tenant

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"regexp"
	"slices"
	"strconv"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-dev/sluice/internal/yamlerr"
)

// chunkTenants is how many tenant entries parseChunks decodes at once.
const chunkTenants = 256

// parseFrom parses the tenant config r holds and returns it with the hex
// SHA-256 of r's bytes. If that digest is unchanged it stops there and
// returns a nil config and no error.
//
// A file whose tenants are a block list under a top-level "tenants:" line
// is read twice and never held whole: once to cut it (splitTenants), and
// once a chunk of entries at a time (parseChunks). Any other layout, or a
// chunk that does not decode cleanly, or a file that changed between the
// two reads, is read whole and decoded at once, which gives the same
// config or the authoritative error.
func parseFrom(r io.ReadSeeker, unchanged string) (*Config, string, error) {
	sp, sum, ok, err := splitTenants(r)
	if err != nil {
		return nil, "", err
	}
	if ok {
		if sum == unchanged {
			return nil, sum, nil
		}
		if cfg, ok, err := parseChunks(r, sp); ok {
			return cfg, sum, withoutValues(err)
		}
	}
	if _, err := r.Seek(0, io.SeekStart); err != nil {
		return nil, "", fmt.Errorf("read tenant config: %w", err)
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, "", fmt.Errorf("read tenant config: %w", err)
	}
	if sum = digest(data); sum == unchanged {
		return nil, sum, nil
	}
	cfg, err := parseWhole(data)
	return cfg, sum, withoutValues(yamlerr.Locate(data, err))
}

// quotedValue is a value as yaml.v3 quotes it in a type error:
// "cannot unmarshal !!str `sk_live...` into []string".
var quotedValue = regexp.MustCompile("`[^`]*`")

// withoutValues leaves the values out of yaml's type errors: in a tenant
// file the value may be an API key written where a list belongs
// (api_keys: k3y-9f2c4e), and a refused reload is logged; yaml quotes up
// to ten characters of it (found in review). The line and the types say
// what to fix.
func withoutValues(err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err
	}
	return errors.New(quotedValue.ReplaceAllString(err.Error(), "a value"))
}

// parseChunks decodes a file that splitTenants cut without decoding the
// whole document, which for 100,000 tenants would build a node tree of
// several hundred megabytes. It decodes the rest of the file (the tenant
// lines blanked, so line numbers hold) for the tiers, then reads the list
// a few hundred entries at a time, each chunk a block sequence of its
// own, decoded by hand when plain enough (fastEntries), else by yaml. ok
// is false when a chunk does not decode cleanly or the list's bytes
// differ from what splitTenants read. Only a layout where every chunk
// means on its own what it means in the file is accepted: no anchors or
// aliases in the list, no directives or document markers, indentation of
// spaces only.
func parseChunks(r io.ReadSeeker, sp split) (cfg *Config, ok bool, err error) {
	var f file
	dec := yaml.NewDecoder(bytes.NewReader(sp.skeleton))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil || len(f.Tenants) != 0 || !tenantsKeyAt(sp.skeleton, sp.head.line-1) {
		return nil, false, nil
	}
	if _, err := r.Seek(int64(sp.head.off), io.SeekStart); err != nil {
		return nil, false, nil
	}
	b := newBuilder(f.Tiers, sp.count)
	var (
		entries []tenantEntry
		buf     []byte
		crc     uint32
	)
	for i, first := range sp.chunks {
		want, last := chunkTenants, sp.end
		if i+1 < len(sp.chunks) {
			last = sp.chunks[i+1].off
		} else {
			want = sp.count - i*chunkTenants
		}
		buf = slices.Grow(buf[:0], last-first.off)[:last-first.off]
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, false, nil
		}
		crc = crc32.Update(crc, castagnoli, buf)
		entries, ok = fastEntries(buf, first.line, sp.indent, entries[:0])
		if !ok || len(entries) != want {
			if entries, ok = yamlEntries(buf, first.line, entries[:0]); !ok || len(entries) != want {
				return nil, false, nil
			}
		}
		for i := range entries {
			b.add(&entries[i])
		}
	}
	if crc != sp.crc {
		return nil, false, nil // the file changed under us
	}
	b.addWorkers(f.Workers)
	cfg, err = b.done()
	return cfg, true, err
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// yamlEntries decodes chunk, whose first line is line base, with yaml.
func yamlEntries(chunk []byte, base int, out []tenantEntry) ([]tenantEntry, bool) {
	dec := yaml.NewDecoder(bytes.NewReader(chunk))
	dec.KnownFields(true)
	if err := dec.Decode(&out); err != nil {
		return out, false
	}
	var extra any
	if !errors.Is(dec.Decode(&extra), io.EOF) {
		return out, false
	}
	for i := range out {
		out[i].line += base - 1
	}
	return out, true
}

// split is a file cut for parseChunks: the skeleton (the file with the
// list's lines blanked, so "tenants:" reads as empty), where the list's
// lines start and end, where each chunk of entries starts (the first at
// the list's start, with any comments before the first entry), how many
// entries there are, and a CRC of the list's bytes.
type split struct {
	skeleton []byte
	head     item
	chunks   []item
	count    int
	end      int
	indent   int // the entries' indentation
	crc      uint32
}

type item struct {
	off  int // byte offset of the line
	line int // its 1-based line number
}

// maxLine bounds the line splitTenants reads; a file with a longer one
// is decoded whole.
const maxLine = 1 << 20

// tenantsKeyAt reports whether the document's top-level key "tenants" is
// on line (1-based). splitTenants finds the list by its lines; a quoted
// string elsewhere can hold lines that read like one (found in review: a
// worker key "…\ntenants:\n  - id: ghost …" gave a tenant that a YAML
// reader of the file does not see). Only the key where splitTenants saw
// it lets the chunks be read as the list.
func tenantsKeyAt(skeleton []byte, line int) bool {
	var doc yaml.Node
	if err := yaml.Unmarshal(skeleton, &doc); err != nil || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return false
	}
	m := doc.Content[0].Content
	for i := 0; i+1 < len(m); i += 2 {
		if m[i].Value == "tenants" {
			return m[i].Line == line
		}
	}
	return false
}

// splitTenants reads r once, returning its digest and, if its layout is
// one parseChunks can read, its cut (ok).
func splitTenants(r io.Reader) (sp split, sum string, ok bool, err error) {
	var (
		listLine = -1 // the "tenants:" line's number
		indent   = -1
		inList   bool
		lineNo   int
		off      int
		h        = sha256.New()
	)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	sc.Split(func(data []byte, atEOF bool) (int, []byte, error) {
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			return i + 1, data[:i+1], nil
		}
		if atEOF && len(data) > 0 {
			return len(data), data, nil
		}
		return 0, nil, nil
	})
	for sc.Scan() {
		line := sc.Bytes()
		_, _ = h.Write(line)
		lineNo++
		start := off
		off += len(line)
		body := bytes.TrimRight(line, "\r\n")
		n := 0
		for n < len(body) && body[n] == ' ' {
			n++
		}
		rest := body[n:]
		switch {
		case len(rest) > 0 && rest[0] == '\t':
			return split{}, "", false, nil // tabs in indentation
		case bytes.IndexByte(bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r")), '\r') >= 0:
			// A carriage return but the one of a CRLF: YAML reads it as
			// a line break, which these lines do not (found by
			// FuzzParseChunked: "- api_keys:\n\r !" took an entry the
			// whole decode refuses).
			return split{}, "", false, nil
		case n == 0 && (bytes.HasPrefix(rest, []byte("---")) || bytes.HasPrefix(rest, []byte("...")) || bytes.HasPrefix(rest, []byte("%"))):
			return split{}, "", false, nil // directives or several documents
		}
		blank := len(rest) == 0 || rest[0] == '#'
		if inList && !blank {
			dash := len(rest) > 0 && rest[0] == '-' && (len(rest) == 1 || rest[1] == ' ')
			if indent < 0 {
				if !dash {
					return split{}, "", false, nil // not a block list
				}
				indent = n
			}
			switch {
			case n == 0 && !dash:
				inList = false // the next top-level key
				sp.end = start
			case n < indent || (n == indent && !dash):
				return split{}, "", false, nil // neither an entry nor a top-level key
			case bytes.ContainsAny(rest, "&*"):
				return split{}, "", false, nil // anchors or aliases (or keys that look like them)
			case n == indent:
				if sp.count%chunkTenants == 0 && sp.count > 0 {
					sp.chunks = append(sp.chunks, item{off: start, line: lineNo})
				}
				sp.count++
			}
		}
		switch {
		case inList:
			sp.skeleton = append(sp.skeleton, '\n')
			sp.crc = crc32.Update(sp.crc, castagnoli, line)
		case n == 0 && isTenantsLine(rest):
			if listLine >= 0 {
				return split{}, "", false, nil // the key twice
			}
			listLine, inList = lineNo, true
			sp.head = item{off: off, line: lineNo + 1}
			sp.chunks = append(sp.chunks, sp.head)
			sp.skeleton = append(sp.skeleton, line...)
		default:
			sp.skeleton = append(sp.skeleton, line...)
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return split{}, "", false, nil
		}
		return split{}, "", false, fmt.Errorf("read tenant config: %w", err)
	}
	sum = hex.EncodeToString(h.Sum(nil))
	if listLine < 0 || sp.count == 0 {
		return split{}, sum, false, nil
	}
	if inList {
		sp.end = off
	}
	sp.indent = indent
	return sp, sum, true, nil
}

// isTenantsLine reports whether a top-level line opens the tenants list:
// "tenants:" with nothing after it but a comment.
func isTenantsLine(rest []byte) bool {
	after, ok := bytes.CutPrefix(rest, []byte("tenants:"))
	if !ok {
		return false
	}
	if len(after) == 0 {
		return true
	}
	if after[0] != ' ' {
		return false // "tenants:#x" is one plain scalar
	}
	after = bytes.TrimLeft(after, " ")
	return len(after) == 0 || after[0] == '#'
}

// Hand decoding of the plainest entries. A chunk whose every line is one
// of these is decoded without yaml (about twenty times faster and with a
// tenth of the garbage); any other line hands the chunk to yaml:
//
//	- key: value        at the entries' indentation
//	  key: value        two spaces deeper
//	(blank lines)
//
// where key is a tenant field other than a list, or api_keys or
// api_key_sha256 with a flow list ([a, b]); a string value starts with a
// letter or digit and has only letters, digits, '.', '_' and '-' (and is
// not YAML's null); a number is a plain decimal. yaml reads exactly these
// the same way: as the literal text for a string field (yaml.v3 gives a
// string field a scalar's text whatever its resolved type), as the
// number for a numeric one.

// fastEntries decodes chunk, whose first line is line base, into out, or
// reports that a line is not of the plain form.
func fastEntries(chunk []byte, base, indent int, out []tenantEntry) ([]tenantEntry, bool) {
	var (
		cur  *tenantEntry
		seen []string // the current entry's keys
	)
	lineNo := base - 1
	for len(chunk) > 0 {
		lineNo++
		line := chunk
		if i := bytes.IndexByte(chunk, '\n'); i >= 0 {
			line, chunk = chunk[:i], chunk[i+1:]
		} else {
			chunk = nil
		}
		line = bytes.TrimSuffix(line, []byte("\r"))
		n := 0
		for n < len(line) && line[n] == ' ' {
			n++
		}
		rest := line[n:]
		switch {
		case len(rest) == 0:
			continue
		case n == indent && bytes.HasPrefix(rest, []byte("- ")):
			out = append(out, tenantEntry{line: lineNo})
			cur, seen = &out[len(out)-1], seen[:0]
			rest = rest[2:]
		case n == indent+2 && cur != nil:
		default:
			return out, false
		}
		k, value, ok := bytes.Cut(rest, []byte(": "))
		key := string(k)
		if !ok || slices.Contains(seen, key) || !setField(cur, key, value) {
			return out, false
		}
		cur.written |= limitBits[key]
		seen = append(seen, key)
	}
	return out, true
}

// setField sets one field of e from a plain value, or reports that the
// value is not of the plain form.
func setField(e *tenantEntry, key string, v []byte) bool {
	switch key {
	case "id":
		return plainString(v, &e.ID)
	case "tier":
		return plainString(v, &e.Tier)
	case "lane":
		return plainString(v, &e.Lane)
	case "api_keys":
		return flowList(v, &e.APIKeys)
	case "api_key_sha256":
		return flowList(v, &e.APIKeySHA256)
	case "submit_rate":
		return plainFloat(v, &e.SubmitRate)
	case "hwm_fraction":
		return plainFloat(v, &e.HWMFraction)
	case "drain_rate":
		return plainFloat(v, &e.DrainRate)
	case "submit_burst":
		return plainInt(v, &e.SubmitBurst)
	case "drain_burst":
		return plainInt(v, &e.DrainBurst)
	case "max_in_flight":
		return plainInt(v, &e.MaxInFlight)
	case "weight":
		return plainFloat(v, &e.Weight)
	case "min_share":
		return plainFloat(v, &e.MinShare)
	case "max_drain_rate":
		return plainFloat(v, &e.MaxDrainRate)
	case "max_drain_burst":
		return plainInt(v, &e.MaxDrainBurst)
	case "max_payload_bytes":
		return plainInt(v, &e.MaxPayloadBytes)
	}
	return false
}

func plainString(v []byte, dst *string) bool {
	if len(v) == 0 || !isAlnum(v[0]) {
		return false
	}
	for _, c := range v {
		if !isAlnum(c) && c != '.' && c != '_' && c != '-' {
			return false
		}
	}
	switch string(v) {
	case "null", "Null", "NULL":
		return false
	}
	*dst = string(v)
	return true
}

func flowList(v []byte, dst *[]string) bool {
	inner, open := bytes.CutPrefix(v, []byte("["))
	inner, closed := bytes.CutSuffix(inner, []byte("]"))
	if !open || !closed || len(inner) == 0 {
		return false
	}
	for item := range bytes.SplitSeq(inner, []byte(", ")) {
		var s string
		if !plainString(item, &s) {
			return false
		}
		*dst = append(*dst, s)
	}
	return true
}

// plainDecimal reports whether v is 0 or a decimal without leading zeros,
// with a fraction if fraction is allowed.
func plainDecimal(v []byte, fraction bool) bool {
	whole, frac, dot := bytes.Cut(v, []byte("."))
	if len(whole) == 0 || len(whole) > 15 || (len(whole) > 1 && whole[0] == '0') || !allDigits(whole) {
		return false
	}
	return !dot || (fraction && len(frac) > 0 && len(frac) <= 15 && allDigits(frac))
}

func plainFloat(v []byte, dst *float64) bool {
	if !plainDecimal(v, true) {
		return false
	}
	f, err := strconv.ParseFloat(string(v), 64)
	*dst = f
	return err == nil
}

func plainInt(v []byte, dst *int) bool {
	if !plainDecimal(v, false) {
		return false
	}
	i, err := strconv.Atoi(string(v))
	*dst = i
	return err == nil
}

func allDigits(b []byte) bool {
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

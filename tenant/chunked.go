package tenant

import (
	"bytes"
	"io"

	"go.yaml.in/yaml/v3"
)

// chunkTenants is how many tenant entries parseChunked decodes at once.
const chunkTenants = 256

// parseChunked reads a file whose tenants are a block list under a
// top-level "tenants:" line without decoding the whole document, which
// for 100,000 tenants would build a node tree of several hundred
// megabytes. It decodes the rest of the file (the tenant lines blanked,
// so line numbers hold) for the tiers, then the list a few hundred
// entries at a time, each chunk a block sequence of its own. ok is false
// when the file is not laid out that way, or a chunk does not decode
// cleanly; the caller then decodes the file whole, which gives the same
// result or the authoritative error. Only a layout where every chunk
// means on its own what it means in the file is accepted: no anchors or
// aliases in the list, no directives or document markers, indentation
// of spaces only.
func parseChunked(data []byte) (cfg *Config, err error, ok bool) {
	sp, ok := splitTenants(data)
	if !ok {
		return nil, nil, false
	}
	var f file
	dec := yaml.NewDecoder(bytes.NewReader(sp.skeleton))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil || len(f.Tenants) != 0 {
		return nil, nil, false
	}
	b := newBuilder(f.Tiers, len(sp.items))
	var entries []tenantEntry
	for start := 0; start < len(sp.items); start += chunkTenants {
		end := min(start+chunkTenants, len(sp.items))
		first := sp.items[start]
		if start == 0 {
			first = sp.head // with the comments before the first entry
		}
		last := sp.end
		if end < len(sp.items) {
			last = sp.items[end].off
		}
		entries = entries[:0]
		dec := yaml.NewDecoder(bytes.NewReader(data[first.off:last]))
		dec.KnownFields(true)
		if err := dec.Decode(&entries); err != nil || len(entries) != end-start {
			return nil, nil, false
		}
		var extra any
		if dec.Decode(&extra) != io.EOF {
			return nil, nil, false
		}
		for i := range entries {
			entries[i].line += first.line - 1
			b.add(&entries[i])
		}
	}
	cfg, err = b.done()
	return cfg, err, true
}

// split is a file cut for parseChunked: the skeleton (the file with the
// list's lines blanked, so "tenants:" reads as empty), where the list's
// lines start (head) and end, and where each tenant entry starts.
type split struct {
	skeleton []byte
	head     item
	items    []item
	end      int
}

type item struct {
	off  int // byte offset of the entry's "-" line
	line int // its 1-based line number
}

// splitTenants cuts data for parseChunked, or reports that its layout is
// not one the chunks can read.
func splitTenants(data []byte) (split, bool) {
	var (
		sp        split
		listLine  = -1 // the "tenants:" line's index
		indent    = -1 // the entries' indentation
		inList    bool
		listLines int // lines in the list, blanked in the skeleton
		lineNo    int
		off       int
	)
	for off < len(data) {
		lineNo++
		nl := bytes.IndexByte(data[off:], '\n')
		end := len(data)
		if nl >= 0 {
			end = off + nl + 1
		}
		line := data[off:end]
		body := bytes.TrimRight(line, "\r\n")
		n := 0
		for n < len(body) && body[n] == ' ' {
			n++
		}
		rest := body[n:]
		switch {
		case len(rest) > 0 && rest[0] == '\t':
			return split{}, false // tabs in indentation
		case n == 0 && (bytes.HasPrefix(rest, []byte("---")) || bytes.HasPrefix(rest, []byte("...")) || bytes.HasPrefix(rest, []byte("%"))):
			return split{}, false // directives or several documents
		}
		blank := len(rest) == 0 || rest[0] == '#'
		if inList && !blank {
			dash := len(rest) > 0 && rest[0] == '-' && (len(rest) == 1 || rest[1] == ' ')
			if indent < 0 {
				if !dash {
					return split{}, false // not a block list
				}
				indent = n
			}
			switch {
			case n == 0 && !dash:
				inList = false // the next top-level key
				sp.end = off
			case n < indent || (n == indent && !dash):
				return split{}, false // neither an entry nor a top-level key
			case bytes.ContainsAny(rest, "&*"):
				return split{}, false // anchors or aliases (or keys that look like them)
			case n == indent:
				sp.items = append(sp.items, item{off: off, line: lineNo})
			}
		}
		if inList {
			listLines++
		} else if n == 0 && isTenantsLine(rest) {
			if listLine >= 0 {
				return split{}, false // the key twice
			}
			listLine, inList = lineNo, true
			sp.head = item{off: end, line: lineNo + 1}
		}
		off = end
	}
	if listLine < 0 || len(sp.items) == 0 {
		return split{}, false
	}
	if inList {
		sp.end = len(data)
	}
	skeleton := make([]byte, 0, sp.head.off+len(data)-sp.end+listLines)
	skeleton = append(skeleton, data[:sp.head.off]...)
	skeleton = append(skeleton, bytes.Repeat([]byte{'\n'}, listLines)...)
	skeleton = append(skeleton, data[sp.end:]...)
	sp.skeleton = skeleton
	return sp, true
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

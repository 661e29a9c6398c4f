package decision

import (
	"errors"
	"net/url"
	"strings"
)

// Kind is the class of a request.
type Kind uint8

const (
	// NonResource: /healthz, /version, /openapi/v3, /metrics, ... served by any apiserver.
	NonResource Kind = iota
	// Resource: a request for a group/version/resource; routed by capability.
	Resource
	// Discovery: /api, /api/v1, /apis, /apis/<group>, /apis/<group>/<version>.
	Discovery
)

func (k Kind) String() string {
	switch k {
	case Resource:
		return "resource"
	case Discovery:
		return "discovery"
	default:
		return "non-resource"
	}
}

// Class is what the classifier learns from a method and a path.
type Class struct {
	Kind      Kind
	Key       ResourceKey
	Verb      string
	Namespace string
	Name      string
}

// maxSegments bounds the path segments we look at; RequestInfo never needs more than the first
// eight (api, group, version, namespaces, ns, resource, name, subresource).
const maxSegments = 10

var (
	errBadEscape = errors.New("path has an invalid percent-encoding")
	errNoPath    = errors.New("request has no :path")
	errNotAbs    = errors.New("path does not start with /")
	errVerbPath  = errors.New("unable to determine kind and namespace from the path")
	errControl   = errors.New("path has a control character")
)

// Classify mirrors k8s.io/apiserver's RequestInfoFactory.NewRequestInfo (pkg/endpoints/request/
// requestinfo.go) with APIPrefixes {api, apis} and GrouplessAPIPrefixes {api}, for the fields that
// decide routing, without allocating for ordinary paths. TestClassifyMatchesRequestInfoFactory and
// FuzzClassify hold it equal to the original.
func Classify(method, rawPath string) (Class, error) {
	if rawPath == "" {
		return Class{}, errNoPath
	}
	for i := 0; i < len(rawPath); i++ {
		if c := rawPath[i]; c < ' ' || c == 0x7f {
			return Class{}, errControl // Go's server (and Envoy's codec) refuse these too
		}
	}
	path, query, _ := strings.Cut(rawPath, "?")
	if path == "" || path[0] != '/' {
		return Class{}, errNotAbs
	}
	if strings.IndexByte(path, '%') >= 0 {
		// Go's server hands the apiserver the decoded path (URL.Path).
		p, err := url.PathUnescape(path)
		if err != nil {
			return Class{}, errBadEscape
		}
		path = p
	}
	var buf [maxSegments]string
	parts := splitPath(path, buf[:0])

	r := Class{Verb: lowerMethod(method)}
	if len(parts) < 3 || (parts[0] != "api" && parts[0] != "apis") {
		if isDiscoveryPath(parts) {
			r.Kind = Discovery
		}
		return r, nil
	}
	grouped := parts[0] == "apis"
	parts = parts[1:]
	if grouped {
		if len(parts) < 3 {
			r.Kind = Discovery // /apis/<group>/<version>
			return r, nil
		}
		r.Key.Group = parts[0]
		parts = parts[1:]
	}
	r.Kind = Resource
	r.Key.Version = parts[0]
	parts = parts[1:]

	if parts[0] == "proxy" || parts[0] == "watch" {
		if len(parts) < 2 {
			return r, errVerbPath
		}
		r.Verb = parts[0]
		parts = parts[1:]
	} else {
		r.Verb = verbForMethod(method)
	}

	if parts[0] == "namespaces" {
		if len(parts) > 1 {
			r.Namespace = parts[1]
			if len(parts) > 2 && parts[2] != "status" && parts[2] != "finalize" {
				parts = parts[2:]
			}
		}
	}
	switch {
	case len(parts) >= 3 && r.Verb != "proxy":
		r.Key.Subresource = parts[2]
		fallthrough
	case len(parts) >= 2:
		r.Name = parts[1]
		fallthrough
	case len(parts) >= 1:
		r.Key.Resource = parts[0]
	}
	if r.Name == "" && r.Verb == "get" {
		r.Verb = "list"
		if isWatch(query) {
			r.Verb = "watch"
		}
	}
	if r.Name == "" && r.Verb == "delete" {
		r.Verb = "deletecollection"
	}
	return r, nil
}

// isDiscoveryPath: /api, /api/<version>, /apis (and /apis/<group>, handled by the caller).
func isDiscoveryPath(parts []string) bool {
	switch {
	case len(parts) == 1:
		return parts[0] == "api" || parts[0] == "apis"
	case len(parts) == 2:
		return parts[0] == "api" || parts[0] == "apis"
	}
	return false
}

// splitPath is RequestInfo's splitPath (strings.Split of the path trimmed of '/') into buf, keeping
// at most maxSegments segments; the last kept one absorbs nothing, extra segments are dropped since
// no field depends on them.
func splitPath(path string, buf []string) []string {
	path = strings.Trim(path, "/")
	if path == "" {
		return buf
	}
	for len(buf) < maxSegments-1 {
		i := strings.IndexByte(path, '/')
		if i < 0 {
			return append(buf, path)
		}
		buf = append(buf, path[:i])
		path = path[i+1:]
	}
	i := strings.IndexByte(path, '/')
	if i >= 0 {
		path = path[:i]
	}
	return append(buf, path)
}

func verbForMethod(method string) string {
	switch method {
	case "POST":
		return "create"
	case "GET", "HEAD":
		return "get"
	case "PUT":
		return "update"
	case "PATCH":
		return "patch"
	case "DELETE":
		return "delete"
	}
	return ""
}

func lowerMethod(method string) string {
	switch method {
	case "GET":
		return "get"
	case "POST":
		return "post"
	case "PUT":
		return "put"
	case "PATCH":
		return "patch"
	case "DELETE":
		return "delete"
	case "HEAD":
		return "head"
	case "OPTIONS":
		return "options"
	}
	return strings.ToLower(method)
}

// isWatch reads the first "watch" query parameter the way metav1.ListOptions' conversion does: any
// value but "false" or "0" (case-insensitive) means watch.
func isWatch(query string) bool {
	for query != "" {
		var kv string
		kv, query, _ = strings.Cut(query, "&")
		if strings.IndexByte(kv, ';') >= 0 {
			continue // url.ParseQuery refuses (and Query() drops) pairs with a semicolon
		}
		k, v, _ := strings.Cut(kv, "=")
		if strings.IndexByte(k, '%') >= 0 || strings.IndexByte(k, '+') >= 0 {
			dk, err := url.QueryUnescape(k)
			if err != nil {
				continue
			}
			k = dk
		}
		if k != "watch" {
			continue
		}
		if strings.IndexByte(v, '%') >= 0 || strings.IndexByte(v, '+') >= 0 {
			dv, err := url.QueryUnescape(v)
			if err != nil {
				continue // url.ParseQuery drops pairs it cannot decode
			}
			v = dv
		}
		return !strings.EqualFold(v, "false") && v != "0"
	}
	return false
}

package decision

import (
	"strings"

	"github.com/skewgate/skewgate/openapi"
)

// SchemaPrefix is the path prefix of the API schemas: /openapi/v2, /openapi/v3 and every document
// under it.
const SchemaPrefix = "/openapi"

// OpenAPIV3Path is the path of the OpenAPI v3 index (openapi.Prefix, defined there once).
const OpenAPIV3Path = openapi.Prefix

// IsSchemaPath says whether path (query included) asks for the API schemas: /openapi and everything
// under /openapi/. It is exactly a route table's path_separated_prefix "/openapi" match, which Envoy
// applies to the path without its query (PathSeparatedPrefixMatcher, source/common/router/
// config_impl.cc in a 2026 main copy; test/dataplane/CONFORMANCE.md row 30), so that ext_proc and
// the route table send a schema request to the same upstreams.
func IsSchemaPath(path string) bool {
	if i := strings.IndexAny(path, "?#"); i >= 0 {
		path = path[:i]
	}
	rest, ok := strings.CutPrefix(path, SchemaPrefix)
	return ok && (rest == "" || rest[0] == '/')
}

// OpenAPIPath splits a request path into an OpenAPI v3 key and the raw query. index: the path is
// /openapi/v3 itself. ok false: not an OpenAPI v3 path the front decides.
//
// The key is the path after "/openapi/v3/" exactly as handler3 takes it (strings.SplitAfterN(path,
// "/", 4)[3] of the decoded path; no cleaning, so a trailing slash is another key). A path with a
// percent-escape or a fragment is left to the schema routing: the decoded key would differ from the
// bytes Envoy's exact path routes compare (they compare the path as normalized, escapes kept).
func OpenAPIPath(rawPath string) (key, query string, index, ok bool) {
	p, query, _ := strings.Cut(rawPath, "?")
	if strings.ContainsAny(p, "%#") {
		return "", "", false, false
	}
	if p == OpenAPIV3Path {
		return "", query, true, true
	}
	key, found := strings.CutPrefix(p, OpenAPIV3Path+"/")
	if !found || key == "" {
		return "", "", false, false
	}
	return key, query, false, true
}

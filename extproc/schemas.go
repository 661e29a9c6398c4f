package extproc

import "strings"

// isSchemaPath says whether path (query included) asks for the API schemas: /openapi and everything
// under /openapi/ (the apiserver serves /openapi/v2, /openapi/v3 and /openapi/v3/<group-version>).
// It is exactly the route table's path_separated_prefix "/openapi" match (xds/schemaroutes.go), which
// Envoy applies to the path without its query (PathSeparatedPrefixMatcher, source/common/router/
// config_impl.cc in a 2026 main copy; test/dataplane/CONFORMANCE.md row 30), so that ext_proc and the route table send a schema request to the same upstreams.
func isSchemaPath(path string) bool {
	if i := strings.IndexAny(path, "?#"); i >= 0 {
		path = path[:i]
	}
	rest, ok := strings.CutPrefix(path, SchemaPrefix)
	return ok && (rest == "" || rest[0] == '/')
}

// SchemaPrefix is the path prefix of the API schemas.
const SchemaPrefix = "/openapi"

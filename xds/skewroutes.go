package xds

import (
	"fmt"
	"regexp"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"

	"github.com/skewgate/skewgate/discovery"
)

// Skew routes: Envoy's own route table carries every resource row of the decision table, so that a
// request for a resource only some apiservers serve still reaches one of them while ext_proc is down,
// hung or restarting (failure_mode_allow keeps the route Envoy chose before ext_proc ran). ext_proc's
// answer still wins: its routing header is matched by the cluster_header routes, which come first.
//
// Each skewed key (group, version, resource, subresource) gets routes that match exactly the request
// shapes decision.Classify maps to that key (k8s.io/apiserver RequestInfo):
//
//	/api/<v>/ or /apis/<g>/<v>/  [watch/]  [namespaces/<ns>/]  <resource>  [/<name> [/<subresource> [/...]]]
//
// Matchers, as Envoy's source has them (read at main during 1.37 development and at older revisions
// back to the 1.2x releases: unchanged in what follows):
//   - a `:path` header prefix matcher pins the group and version. Route header matchers are checked
//     before the path matcher (RouteEntryImplBase::matchRoute, source/common/router/config_impl.cc),
//     so a request for another group version is turned away by a string compare.
//   - the path safe_regex (RE2, full match on the path without query and fragment:
//     Matchers::PathMatcher::match, source/common/common/matchers.cc) checks the shape and names the
//     resource. RE2 programs larger than the runtime value re2.max_program_size.error_level (default
//     100; source/common/common/regex.cc) are refused, and with them the whole RouteConfiguration, so
//     every pattern is kept under maxRegexProgram (regexCost, measured against RE2's ProgramSize).
//   - `:method` safe_regex where verbs of one key are served by different apiservers.
//
// At the supported releases RE2 runs in Latin-1 mode (CVE-2026-73552, changelogs/1.37.6.yaml to
// 1.40.0.yaml), the same for these ASCII patterns, and the 1.37.0-1.40.0 changelogs change nothing
// else above (test/dataplane/CONFORMANCE.md row 30).
//
// The connection manager normalizes the path before routing (normalize_path: RFC 3986 with
// percent-encoded unreserved characters decoded, dot segments removed; merge_slashes), so names made
// of unreserved characters are matched as literals. A segment is any run of printable ASCII but '/':
// the canonical path has nothing else (url::CanonicalizePath escapes the rest).
//
// Left to ext_proc alone (failing open, they take the default routes as before): the legacy /proxy/
// prefix (RequestInfo still parses it; no apiserver serves it), a %2F inside a segment (the apiserver
// splits there, the patterns do not), and names too long for a pattern under maxRegexProgram. Where a
// key's list and watch are served apart, the first "watch" query parameter decides, as Envoy parses
// it: pairs with ';', '+' or an invalid escape are read differently by Go's url.ParseQuery.
const (
	segment = `[!-.0-~]+` // one path segment of the canonical path
	anyRest = `[!-~]*`    // the rest of a path, any depth

	// maxRegexProgram is what we allow one pattern to cost, in RE2 program instructions: below
	// Envoy's default limit of 100 with room for differences between RE2 releases.
	maxRegexProgram = 90
)

// skewShape is one of the request shapes of a key that may be decided differently.
type skewShape uint8

const (
	shapeAll        skewShape = iota // every shape of the key: one decision for every verb
	shapeWatch                       // the legacy /watch/ prefix: verb watch, whatever the method
	shapeNamed                       // .../<resource>/<name>[/<subresource>]: get, update, patch, delete, create
	shapeCollection                  // .../<resource>: list or watch (?watch=), create, deletecollection
)

// methodGroup is a set of methods of one shape that share a decision. methods nil: every method not
// taken by an earlier group (the route has no :method matcher).
type methodGroup struct {
	methods  []string
	verb     string
	query    *routev3.QueryParameterMatcher // the first "watch" query parameter, if it decides
	decision discovery.Decision
}

// watchOff and watchOn read the first "watch" query parameter as metav1.ListOptions does: any value
// but "false" or "0" (case-insensitive) asks for a watch. Envoy matches the first value of the
// parameter as it stands in the path, NOT percent-decoded (RouteEntryImplBase::matchRoute parses with
// QueryParamsMulti::parseQueryString; ConfigUtility::matchQueryParams, getFirstValue): a
// percent-encoded watch parameter is read differently by Envoy and the apiserver, and is left to
// ext_proc (a fail-open limit in the README).
var (
	watchOff = &routev3.QueryParameterMatcher{Name: "watch", QueryParameterMatchSpecifier: &routev3.QueryParameterMatcher_StringMatch{
		StringMatch: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: `(?i:false)|0`}}},
	}}
	watchOn = &routev3.QueryParameterMatcher{Name: "watch", QueryParameterMatchSpecifier: &routev3.QueryParameterMatcher_StringMatch{
		StringMatch: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: `(?s).*`}}},
	}}
)

// namedVerbs and collectionVerbs are the verbs the classifier gives each method for a path with and
// without a name (verbForMethod, and the name-less GET and DELETE rules); "" for any other method.
var namedVerbs = []methodGroup{
	{methods: []string{"GET", "HEAD"}, verb: "get"},
	{methods: []string{"POST"}, verb: "create"},
	{methods: []string{"PUT"}, verb: "update"},
	{methods: []string{"PATCH"}, verb: "patch"},
	{methods: []string{"DELETE"}, verb: "delete"},
	{verb: ""},
}

var collectionVerbs = []methodGroup{
	{methods: []string{"GET", "HEAD"}, verb: "list"},
	{methods: []string{"POST"}, verb: "create"},
	{methods: []string{"PUT"}, verb: "update"},
	{methods: []string{"PATCH"}, verb: "patch"},
	{methods: []string{"DELETE"}, verb: "deletecollection"},
	{verb: ""},
}

// expressible says whether the classifier can address key through the shapes below at all.
func expressible(k discovery.ResourceKey) error {
	for _, s := range []string{k.Version, k.Resource} {
		if s == "" {
			return fmt.Errorf("empty version or resource")
		}
	}
	for _, s := range []string{k.Group, k.Version, k.Resource, k.Subresource} {
		for i := 0; i < len(s); i++ {
			if !unreservedByte(s[i]) {
				return fmt.Errorf("%q is not made of unreserved characters", s)
			}
		}
	}
	switch k.Resource {
	case "watch", "proxy":
		return fmt.Errorf("resource %q is read as a verb prefix", k.Resource)
	}
	return nil
}

func unreservedByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

// keyPrefix is the path prefix of a key's group version.
func keyPrefix(k discovery.ResourceKey) (literal, pattern string) {
	if k.Group == "" {
		return "/api/" + k.Version + "/", `/api/` + segment + `/`
	}
	return "/apis/" + k.Group + "/" + k.Version + "/", `/apis/` + segment + `/` + segment + `/`
}

// keyRegex is the path pattern of one shape of a key.
func keyRegex(k discovery.ResourceKey, shape skewShape) string {
	_, p := keyPrefix(k)
	// "namespaces/<ns>/" before the resource is dropped by the classifier unless what follows is
	// "status" or "finalize" (the namespace's own subresources); a namespaces subresource other
	// than those is only reached through the namespaced form.
	ns := `(?:namespaces/` + segment + `/)?`
	switch {
	case k.Resource == "status" || k.Resource == "finalize":
		ns = ""
	case k.Resource == "namespaces" && k.Subresource != "" && k.Subresource != "status" && k.Subresource != "finalize":
		ns = `namespaces/` + segment + `/`
	}
	r := regexp.QuoteMeta(k.Resource)
	var rest string
	switch {
	case k.Subresource != "":
		rest = r + `/` + segment + `/` + regexp.QuoteMeta(k.Subresource) + `(?:/` + anyRest + `)?`
	case shapeAll == shape || shapeWatch == shape:
		rest = r + `(?:/` + segment + `)?/?`
	case shapeNamed == shape:
		rest = r + `/` + segment + `/?`
	default:
		rest = r + `/?`
	}
	switch shape {
	case shapeAll:
		return p + `(?:watch/)?` + ns + rest
	case shapeWatch:
		return p + `watch/` + ns + rest
	}
	return p + ns + rest
}

// keyRoutes returns the routes of one key: the table's rows of the key, by shape and method.
func (tb *translator) keyRoutes(k discovery.ResourceKey, retry *routev3.RetryPolicy) ([]*routev3.Route, error) {
	if err := expressible(k); err != nil {
		return nil, err
	}
	table := tb.top.Table()
	d := func(verb string) discovery.Decision { return table.Resource(k, verb) }
	uniform := true
	for _, v := range []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"} {
		uniform = uniform && d(v) == d("")
	}
	type shapeGroups struct {
		shape  skewShape
		groups []methodGroup
	}
	var plan []shapeGroups
	if uniform {
		plan = []shapeGroups{{shapeAll, []methodGroup{{verb: ""}}}}
	} else {
		plan = append(plan, shapeGroups{shapeWatch, []methodGroup{{verb: "watch"}}})
		plan = append(plan, shapeGroups{shapeNamed, namedVerbs})
		if k.Subresource == "" {
			groups := collectionVerbs
			if d("list") != d("watch") {
				// GET of a collection is a watch when its first watch parameter says so.
				groups = append([]methodGroup{
					{methods: []string{"GET", "HEAD"}, verb: "list", query: watchOff},
					{methods: []string{"GET", "HEAD"}, verb: "watch", query: watchOn},
				}, collectionVerbs...)
			}
			plan = append(plan, shapeGroups{shapeCollection, groups})
		}
	}
	prefix, _ := keyPrefix(k)
	var out []*routev3.Route
	for _, sg := range plan {
		re := keyRegex(k, sg.shape)
		if c := regexCost(re); c > maxRegexProgram {
			return nil, fmt.Errorf("pattern %s costs %d RE2 instructions, more than %d", re, c, maxRegexProgram)
		}
		groups := make([]methodGroup, len(sg.groups))
		copy(groups, sg.groups)
		for i := range groups {
			groups[i].decision = d(groups[i].verb)
		}
		// The last group takes every method left. When it decides default, so do the default
		// routes after all skew routes, and any group deciding default needs no route of its own.
		catchAllDefault := groups[len(groups)-1].decision.Action == discovery.ActionDefault
		for _, g := range groups {
			// Groups on the watch parameter overlap the GET group after them: never left out.
			if catchAllDefault && g.decision.Action == discovery.ActionDefault && g.query == nil {
				continue
			}
			rs, err := tb.groupRoutes(k, sg.shape, prefix, re, g, retry)
			if err != nil {
				return nil, err
			}
			out = append(out, rs...)
		}
	}
	return out, nil
}

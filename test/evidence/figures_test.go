package evidence

import "fmt"

// e2e names an end-to-end artifact.
func e2e(test string) string { return "e2e/" + test + ".json" }

const (
	bench    = "results.json"
	maketest = "maketest.json" // hack/maketest.sh, SKEWGATE_MAKETEST_RESULT
)

// lat is a latency figure of the make bench table: target a (direct), b (in-tree) or c (front).
func lat(target, verb string, rate int, field string) value {
	return at(fmt.Sprintf("latency.[Target^=%s.;Resource=mutatingadmissionpolicies;Verb=%s;Rate=%d].%s", target, verb, rate, field))
}

// latRow is a row of README's make bench table: "p50 / p99 ms" per target, then front / in-tree.
func latRow(verb string, rate int, direct bool) figure {
	text := fmt.Sprintf("| %s `mutatingadmissionpolicies` %d/s p50 / p99 |", verb, rate)
	var args []arg
	if direct {
		text += " %s / %s ms |"
		args = append(args, fx(2, lat("a", verb, rate, "P50")), fx(2, lat("a", verb, rate, "P99")))
	} else {
		text += " |"
	}
	text += " %s / %s ms | %s / %s ms | %s / %s |"
	args = append(args, fx(2, lat("b", verb, rate, "P50")), fx(2, lat("b", verb, rate, "P99")),
		fx(2, lat("c", verb, rate, "P50")), fx(2, lat("c", verb, rate, "P99")),
		fx(2, ratio(lat("c", verb, rate, "P50"), lat("b", verb, rate, "P50"))), fx(2, ratio(lat("c", verb, rate, "P99"), lat("b", verb, rate, "P99"))))
	return figure{bench, text, args}
}

// commonCost is the stand-in front's median over the direct one for configmaps (every apiserver
// serves it) at verb and rate.
func commonCost(verb string, rate int) value {
	m := func(target string) value {
		return at(fmt.Sprintf("latency.[Target^=%s.;Resource=configmaps;Verb=%s;Rate=%d].P50", target, verb, rate))
	}
	return ratio(m("c"), m("a"))
}

// commonCosts is commonCost at 50/s and 200/s, GET and LIST.
func commonCosts() []value {
	return []value{commonCost("GET", 50), commonCost("LIST", 50), commonCost("GET", 200), commonCost("LIST", 200)}
}

func bm(name, unit string) value { return at("benchmarks." + name + "." + unit) }

const mib = 1.0 / (1 << 20)

// figures are README's numbers that come from an artifact, each with the sentence that states it.
var figures = []figure{
	// The introduction.
	{e2e("TestScenarioNoWrongNotFound"), "we measured %s, %s of %s", []arg{pct(at("figures.roundrobin_404_share")), n(at("figures.roundrobin_404")), n(at("figures.roundrobin_calls"))}},

	// How long make test takes.
	{maketest, "`make test` takes about %s minutes with %s binaries and Go caches (measured here, %s cores: %s)",
		[]arg{fx(0, scaled(at("wall_seconds"), 1.0/60)), word1("testbed_binaries_before", "go_build_cache_before"), d(at("cpus")), minSec(at("wall_seconds"))}},

	// The end-to-end table.
	{e2e("TestScenarioNoWrongNotFound"), "**%s of %s** calls 404 through skewgate; **%s of %s (%s)** through a plain round-robin front (the test requires at least %s)",
		[]arg{n(at("figures.skewgate_404")), n(at("figures.skewgate_calls")), n(at("figures.roundrobin_404")), n(at("figures.roundrobin_calls")),
			pct(at("figures.roundrobin_404_share")), pct(at("figures.roundrobin_min_share_bound"))}},
	{e2e("TestScenarioExplain"), "**%s failures** through skewgate; %s of %s through round-robin",
		[]arg{n(at("figures.front_failures")), n(at("figures.round_robin_failures")), n(at("figures.rounds"))}},
	{e2e("TestScenarioOpenAPI"), "the front's own index (%s keys,", []arg{n(at("figures.index_keys"))}},
	{e2e("TestScenarioOpenAPI"), "**%s document reads, all 200 with exactly the bytes of their hash**", []arg{n(at("figures.document_reads"))}},
	{e2e("TestScenarioOpenAPI"), "explain **%s of %s failures**; ext_proc stopped: every document 200 (%s redirected), explain **%s of %s failures**",
		[]arg{n(at("figures.explain_failures")), n(at("figures.explain_rounds")), n(at("figures.documents_redirected_ext_proc_stopped")),
			n(at("figures.explain_failures_ext_proc_stopped")), n(at("figures.explain_rounds"))}},
	{e2e("TestScenarioOpenAPIMerged"), "`kubectl explain` %s times each (fresh cache) **%s failures** for `mutatingadmissionpolicies` and for `validatingadmissionpolicies`, %s of %s each through round-robin",
		[]arg{n(at("figures.rounds")), n(same(at("figures.mutatingadmissionpolicies.front_failures"), at("figures.validatingadmissionpolicies.front_failures"))),
			n(same(at("figures.mutatingadmissionpolicies.round_robin_failures"), at("figures.validatingadmissionpolicies.round_robin_failures"))), n(at("figures.rounds"))}},
	{e2e("TestScenarioOpenAPIMerged"), "failed %s of %s times in the %s s window until skewgate refetched (2 s after the CRD's change: a gap, a CRD's new document reaches the front's index only then), then %s of %s failures; and the front's own index named the document with the new field **%s s** after the change",
		[]arg{n(at("figures.crd_explain_in_window.failures")), n(at("figures.crd_explain_in_window.attempts")), fx(0, scaled(at("figures.crd_explain_window_ms"), 1e-3)),
			n(at("figures.crd_explain_failures")), n(at("figures.rounds")), fx(1, scaled(at("figures.crd_new_field_seen_ms"), 1e-3))}},
	{e2e("TestScenarioRollingUpgrade"), "%s calls, **every one answered 200 or 201**, 0 wrong 404s; every acknowledged write (%s configmaps + %s policies) readable afterwards. %s HTTP exchanges were 503s with `Retry-After: 1`",
		[]arg{n(same(at("figures.calls"), sum(or0("figures.calls_by_status.200"), or0("figures.calls_by_status.201")))),
			n(at("figures.acknowledged_configmaps")), n(at("figures.acknowledged_mutatingadmissionpolicies")), n(or0("figures.http_exchanges_by_status.503"))}},
	{e2e("TestGatewayAnswersEjectNobody"), "(504, 200, that 500, or a stream the apiserver resets: %s of %s)",
		[]arg{n(at("figures.attack_upstream_resets")), n(total("figures.attack_by_status./api/v1/namespaces/default/configmaps?timeout=1ms"))}},
	{e2e("TestGatewayAnswersEjectNobody"), "normal client **%s requests (%s during the attack), all 200**, %s apiserver ejected",
		[]arg{n(same(at("figures.normal_requests"), or0("figures.normal_by_status.200"))), n(at("figures.normal_during_attack")), word("no", at("figures.ejections"))}},
	{e2e("TestImmediateHealthCheckFailIgnored"), "normal client **%s requests, all 200**; the attacker's %s answers all without the header; %s apiserver marked unhealthy",
		[]arg{n(same(total("figures.normal_by_status"), or0("figures.normal_by_status.200"))), n(same(at("figures.attack_requests"), or0("figures.attack_by_status.200"))),
			word("no", at("figures.hosts_marked_unhealthy"))}},
	{e2e("TestOpenAPIRangeFloodThroughTheFront"), "%s clients without credentials ask the front for `/openapi/v3` with %s one-byte ranges each",
		[]arg{n(at("figures.flood_clients")), n(at("figures.ranges_per_request"))}},
	{e2e("TestOpenAPIRangeFloodThroughTheFront"), "**%s certificate and token requests, all 200**; %s of the %s flood requests got the index",
		[]arg{n(ifNone(at("figures.client_requests"), "figures.client_failed")), word("none", at("figures.flood_served_index")), n(at("figures.flood_requests"))}},
	{e2e("TestScenarioKillNew"), "the first %s ms after the kill, none waiting for a timeout (the test fails one that took the %s s connect timeout); %s ms from its `/readyz` to success (the test fails above two probe intervals, one publish, the client's pacing and the request itself: about %s s)",
		[]arg{n(at("figures.kill_to_first_503_ms")), fx(0, scaled(at("figures.answer_bound_ms"), 1e-3)), n(at("figures.readyz_to_success_ms")), fx(1, scaled(at("figures.readyz_to_success_bound_ms"), 1e-3))}},
	{e2e("TestFailOpenKeepsSkewedRoutes"), "%s, %s and %s requests, **all 200**: Envoy's own route table sends the skewed resource to the capable apiserver; %s wrong 404s, %s 503s",
		[]arg{n(same(at("figures.ext_proc stopped.requests"), or0("figures.ext_proc stopped.by_status.200"))),
			n(same(at("figures.ext_proc hung.requests"), or0("figures.ext_proc hung.by_status.200"))),
			n(same(at("figures.skewgate restarting.requests"), or0("figures.skewgate restarting.by_status.200"))),
			n(sum(at("figures.ext_proc stopped.wrong_404"), at("figures.ext_proc hung.wrong_404"), at("figures.skewgate restarting.wrong_404"))),
			n(sum(or0("figures.ext_proc stopped.by_status.503"), or0("figures.ext_proc hung.by_status.503"), or0("figures.skewgate restarting.by_status.503")))}},
	{e2e("TestColdStart"), "**%s s, %s s and %s s after the last of that node's parts was up**",
		[]arg{fx(1, scaled(at("figures.nodes.old.last_part_up_to_kubectl_ms"), 1e-3)), fx(1, scaled(at("figures.nodes.new.last_part_up_to_kubectl_ms"), 1e-3)),
			fx(1, scaled(at("figures.nodes.old2.last_part_up_to_kubectl_ms"), 1e-3))}},
	{e2e("TestColdStart"), "kubectl itself took %s, %s and %s s",
		[]arg{fx(1, scaled(at("figures.nodes.old.successful_kubectl_run_ms"), 1e-3)), fx(1, scaled(at("figures.nodes.new.successful_kubectl_run_ms"), 1e-3)),
			fx(1, scaled(at("figures.nodes.old2.successful_kubectl_run_ms"), 1e-3))}},
	{e2e("TestColdStart"), "%s, %s and %s s here",
		[]arg{fx(1, scaled(at("figures.nodes.old.bound_from_last_part_up_ms"), 1e-3)), fx(1, scaled(at("figures.nodes.new.bound_from_last_part_up_ms"), 1e-3)),
			fx(1, scaled(at("figures.nodes.old2.bound_from_last_part_up_ms"), 1e-3))}},
	{e2e("TestColdStartRestarts"), "skewgate restarted (SIGTERM, a new process %s s later) under 4 clients reading through its node's front; the restarted skewgate's informers held %s s",
		[]arg{fx(0, scaled(at("figures.restart_skewgate.skewgate_away_ms"), 1e-3)), fx(1, scaled(at("figures.restart_skewgate.informers_held_ms"), 1e-3))}},
	{e2e("TestColdStartRestarts"), "**%s requests, all 200**, the skewed API included", []arg{n(same(at("figures.restart_skewgate.requests"), or0("figures.restart_skewgate.by_outcome.200")))}},
	{e2e("TestColdStartRestarts"), "(%s requests decided that way)", []arg{n(at("figures.restart_skewgate.unsynced_extproc_decisions"))}},
	{e2e("TestColdStartRestarts"), "data plane restarted (%s s away) while skewgate runs | %s connection refused while nothing listened; its listener %s ms after the start",
		[]arg{fx(0, scaled(at("figures.restart_data_plane.data_plane_away_ms"), 1e-3)), n(at("figures.restart_data_plane.by_outcome.connection refused")), n(at("figures.restart_data_plane.start_to_listener_ms"))}},
	{e2e("TestColdStartRestarts"), "first 200 after %s ms; **every request started once it listened: 200** (%s)",
		[]arg{n(at("figures.restart_data_plane.start_to_first_200_ms")), n(same(total("figures.restart_data_plane.started_after_listener"), or0("figures.restart_data_plane.started_after_listener.200")))}},
	{e2e("TestColdStartRestarts"), "every shared read started %s ms after the kill or later (three of the front's probe intervals): **%s, all 200**; of the %s started within those %s ms, %s got 503 (never a 404); of the %s in flight at the kill, %s got 503",
		[]arg{n(at("figures.kill_node.detection_window_ms")), n(same(total("figures.kill_node.shared_started_after_kill"), or0("figures.kill_node.shared_started_after_kill.200"))),
			n(total("figures.kill_node.shared_started_in_detection_window")), n(at("figures.kill_node.detection_window_ms")), n(or0("figures.kill_node.shared_started_in_detection_window.503")),
			n(total("figures.kill_node.shared_in_flight_at_kill")), n(or0("figures.kill_node.shared_in_flight_at_kill.503"))}},
	{e2e("TestColdStartRestarts"), "**%s requests, all 200 or 201**, %s lost writes (%s configmaps and %s policies acknowledged, each read back), the watch saw all %s; the process gone %s ms after the signal, the new one listening %s ms after the kill, the data plane back on its xDS %s ms and on its ext_proc %s ms after it listened (the test fails above %s ms)",
		[]arg{n(same(at("figures.sigkill_skewgate.requests"), sum(or0("figures.sigkill_skewgate.by_outcome.200"), or0("figures.sigkill_skewgate.by_outcome.201")))), n(at("figures.sigkill_skewgate.lost_writes")), n(at("figures.sigkill_skewgate.acknowledged_configmaps")),
			n(at("figures.sigkill_skewgate.acknowledged_mutatingadmissionpolicies")), n(same(at("figures.sigkill_skewgate.watch_events_seen"), at("figures.sigkill_skewgate.acknowledged_configmaps"))), n(at("figures.sigkill_skewgate.kill_to_exit_ms")),
			n(at("figures.sigkill_skewgate.kill_to_new_process_listening_ms")), n(at("figures.sigkill_skewgate.listening_to_data_plane_xds_ms")), n(at("figures.sigkill_skewgate.listening_to_extproc_ms")), n(at("figures.sigkill_skewgate.reconnect_bound_ms"))}},
	{e2e("TestCertificateIdentityWithoutExtProc"), "certificate clients **%s, %s and %s requests, %s, %s and %s of them 401 or 403** (%s, %s and %s while ext_proc was away)",
		[]arg{n(total("figures.skewgate stopped 5 s and restarted.certificate.by_status")), n(total("figures.ext_proc hangs.certificate.by_status")), n(total("figures.ext_proc refuses.certificate.by_status")), n(at("figures.skewgate stopped 5 s and restarted.certificate.denied_401_403")), n(at("figures.ext_proc hangs.certificate.denied_401_403")), n(at("figures.ext_proc refuses.certificate.denied_401_403")), n(total("figures.skewgate stopped 5 s and restarted.certificate.while_away_by_status")), n(total("figures.ext_proc hangs.certificate.while_away_by_status")), n(total("figures.ext_proc refuses.certificate.while_away_by_status"))}},
	{e2e("TestCertificateIdentityWithoutExtProc"), "token clients beside them %s, %s and %s, %s, %s and %s |",
		[]arg{n(total("figures.skewgate stopped 5 s and restarted.token.by_status")), n(total("figures.ext_proc hangs.token.by_status")), n(total("figures.ext_proc refuses.token.by_status")), n(at("figures.skewgate stopped 5 s and restarted.token.denied_401_403")), n(at("figures.ext_proc hangs.token.denied_401_403")), n(at("figures.ext_proc refuses.token.denied_401_403"))}},
	{e2e("TestIdentityEqualsTheApiserversOwn"), "%s times each through the front | user, UID, groups and extra (`authentication.kubernetes.io/credential-id`) **equal** to the apiserver's own every time",
		[]arg{n(same(at("figures.a token.front.equal"), at("figures.a UID.front.equal"), at("figures.groups, system:masters not last.front.equal"),
			at("figures.several O in one RDN.front.equal"), at("figures.no O.front.equal"), at("figures.non-ASCII, commas and a plus.front.equal"), at("figures.two UIDs.front.equal")))}},
	{e2e("TestIdentityEqualsTheApiserversOwn"), "refused with 503 and `Retry-After` %s of %s times",
		[]arg{n(at("figures.an empty O.front.refused 503")), n(total("figures.an empty O.front"))}},

	{e2e("TestInClusterClientsToday"), "lists `mutatingadmissionpolicies` %s times through the real kube-proxy", []arg{n(at("figures.requests"))}},
	{e2e("TestInClusterClientsToday"), "**%s of %s (%s)** answered a wrong 404, the rest were served; %s other failures",
		[]arg{n(at("figures.wrong_404")), n(same(at("figures.requests"), sum(at("figures.wrong_404"), at("figures.served"), at("figures.other_failures")))), pct(at("figures.wrong_404_share")), n(at("figures.other_failures"))}},
	{e2e("TestInClusterClientsThroughFronts"), "(apiservers on `--endpoint-reconciler-type=%s`, member TTL %s s), then: one node's skewgate and data plane killed, a skewgate restarted under traffic, a front restarted under traffic, a rival writer for %s s (every %s s),",
		[]arg{word1("figures.apiserver_reconciler"), n(at("figures.member_ttl_seconds")), n(at("figures.rival.window_seconds")), n(at("figures.rival.rival_interval_seconds"))}},
	{e2e("TestInClusterClientsThroughFronts"), "the slice lists exactly both fronts %s s after the skewgates started (kube-proxy %s s later); **%s of %s** skewed lists answered a wrong 404, %s failures",
		[]arg{fx(1, at("figures.takeover_seconds")), fx(2, at("figures.takeover_kube_proxy_seconds")), n(at("figures.steady.counts.wrong_404")),
			n(same(at("figures.steady.requests"), total("figures.steady.counts"))), n(sum(at("figures.steady.counts.connection_errors"), at("figures.steady.counts.other_failures")))}},
	{e2e("TestInClusterClientsThroughFronts"), "its front left the slice after %s s (the test fails above %s s), %s wrong 404s during that window (%s connection errors to the dead front, counted apart) and %s of %s served after it; skewgate restarted: %s lists, all served",
		[]arg{fx(1, at("figures.kill.slice_seconds")), n(at("figures.kill.bound_slice_seconds")), n(sum(at("figures.kill.during.wrong_404"), at("figures.kill.during.other_failures"))),
			n(at("figures.kill.during.connection_errors")), n(at("figures.kill.after.served")), n(total("figures.kill.after")),
			n(same(total("figures.skewgate_restart.during"), at("figures.skewgate_restart.during.served")))}},
	{e2e("TestInClusterClientsThroughFronts"), "Front restarted (its data plane killed and started again, its skewgate running): it left the slice after %s s (the test fails above %s s), %s wrong 404s meanwhile (%s connection errors to it, counted apart), back %s s after its start, then %s of %s served. A client verifying the fronts for `kubernetes.default.svc`: %s of %s served.",
		[]arg{fx(1, at("figures.front_restart.left_seconds")), n(at("figures.front_restart.bound_left_seconds")), n(sum(at("figures.front_restart.during.wrong_404"), at("figures.front_restart.during.other_failures"))),
			n(at("figures.front_restart.during.connection_errors")), fx(1, at("figures.front_restart.rejoin_seconds")), n(at("figures.front_restart.after.served")), n(total("figures.front_restart.after")),
			n(at("figures.by_name.counts.served")), n(same(at("figures.by_name.requests"), total("figures.by_name.counts")))}},
	{e2e("TestInClusterClientsThroughFronts"), "Rival writer (%s writes): skewgate yielded (%s writes of its own, %s slice versions) and took the objects back %s s after it stopped; meanwhile %s of %s lists met the wrong 404s of today's endpoints",
		[]arg{n(at("figures.rival.rival_writes")), n(at("figures.rival.skewgate_slice_writes")), n(at("figures.rival.slice_versions")), fx(1, at("figures.rival.take_back_seconds")),
			n(at("figures.rival.lists_during.wrong_404")), n(total("figures.rival.lists_during"))}},
	{e2e("TestInClusterClientsThroughFronts"), "the slice fell back to the apiservers' own addresses %s s after the last member's signal (%s s when all stop at once; the test fails above %s s); %s empty versions among the %s seen",
		[]arg{fx(2, at("figures.stop.fallback_seconds")), fx(2, at("figures.stop_together.fallback_seconds")), n(same(at("figures.stop.bound_seconds"), at("figures.stop_together.bound_seconds"))),
			n(at("figures.empty_slice_versions")), n(at("figures.slice_versions_seen"))}},
	{e2e("TestControllerManagerThroughTheFront"), "deletes a namespace holding %s of them | against the local apiserver **%s of %s workloads stay in etcd** in the finalized namespace, and %s of %s dependents of the deleted workload are still there after %s s; through the front **%s and %s**, failing open %s and %s; %s dependent of a live owner deleted in any run",
		[]arg{n(at("figures.objects_per_namespace")), n(at("figures.local_left")), n(at("figures.objects_per_namespace")), n(at("figures.local_gc.uncollected")), n(at("figures.gc_dependents_per_owner")),
			fx(0, scaled(at("figures.gc_collect_bound_ms"), 1e-3)), n(at("figures.front_left")), n(at("figures.front_gc.uncollected")), n(at("figures.failopen_left")), n(at("figures.failopen_gc.uncollected")),
			word("no", sum(at("figures.local_gc.wrong_deletions"), at("figures.front_gc.wrong_deletions"), at("figures.failopen_gc.wrong_deletions")))}},

	// make bench: the table.
	latRow("GET", 200, true),
	{bench, "the stand-in front costs %s-%sx the\ndirect median at 50-200/s and %sx (LIST) and %sx (GET) at 500/s",
		[]arg{fx(1, extreme(-1, commonCosts()...)), fx(1, extreme(1, commonCosts()...)), fx(1, commonCost("LIST", 500)), fx(1, commonCost("GET", 500))}},
	latRow("GET", 500, true),
	latRow("LIST", 500, false),
	{bench, "| SIGKILL of new: answers while down | | %s x 503, **%s x 404** | %s x 503, %s 404 |",
		[]arg{d(or0("convergence.[target=old apiserver + in-tree MVP].whileDown.503")), d(or0("convergence.[target=old apiserver + in-tree MVP].whileDown.404")),
			d(or0("convergence.[target=skewgate front].whileDown.503")), word("no", or0("convergence.[target=skewgate front].whileDown.404"))}},
	{bench, "| new's `/readyz` to success | | %s ms | %s ms |",
		[]arg{d(at("convergence.[target=old apiserver + in-tree MVP].backMs")), d(at("convergence.[target=skewgate front].backMs"))}},
	// make bench: the prose.
	{bench, "1000 upstreams in 10 versions -> %s clusters, Topology build %s ms, translation %s ms, %s MiB of resources, %s MiB RSS; 100 upstreams: %s ms, %s ms, %s KiB",
		[]arg{d(at("scale.[upstreams=1000].clusters")), fx(0, at("scale.[upstreams=1000].buildMs")), fx(0, at("scale.[upstreams=1000].translateMs")),
			fx(1, scaled(at("scale.[upstreams=1000].snapshotKiB"), 1.0/1024)), d(at("scale.[upstreams=1000].rssMiB")),
			fx(0, at("scale.[upstreams=100].buildMs")), fx(0, at("scale.[upstreams=100].translateMs")), d(at("scale.[upstreams=100].snapshotKiB"))}},
	{bench, "1000 upstreams in 10 versions %s ms (%s clusters, %s routes including the skew routes); 100 upstreams with 10 sets %s ms; a Topology change reaches an ADS client in %s ms",
		[]arg{sig2(scaled(bm("BenchmarkTranslate1000", "ns/op"), 1e-6)), d(bm("BenchmarkTranslate1000", "clusters")), d(bm("BenchmarkTranslate1000", "routes")),
			sig2(scaled(bm("BenchmarkTranslate100x10", "ns/op"), 1e-6)), sig2(scaled(bm("BenchmarkPush", "ns/op"), 1e-6))}},
	{bench, "classify %s ns, decide %s ns, both with %s allocations; the whole in-process answer %s us, %s allocations",
		[]arg{fx(0, bm("BenchmarkClassify", "ns/op")), fx(0, bm("BenchmarkDecide", "ns/op")), d(same(bm("BenchmarkClassify", "allocs/op"), bm("BenchmarkDecide", "allocs/op"))),
			sig2(scaled(bm("BenchmarkServerDecide", "ns/op"), 1e-3)), d(bm("BenchmarkServerDecide", "allocs/op"))}},
	{bench, "%s us / %s ms vs %s us / %s ms at 2k/s, %s us / %s ms vs %s us / %s ms at 5k/s, %s us / %s ms vs %s us / %s ms at 10k/s", loadArgs()},
	{bench, "%s MiB of input documents, %s MiB merged): a Topology build that merges them takes %s ms and allocates %s MiB, %s MiB retained; a rebuild for an unrelated change (merges memoised) %s ms, against %s ms for the same Build without OpenAPI",
		[]arg{fx(1, scaled(bm("BenchmarkBuildOpenAPI/merge-cold", "input-bytes"), mib)), fx(1, scaled(bm("BenchmarkBuildOpenAPI/merge-cold", "merged-bytes"), mib)),
			sig2(scaled(bm("BenchmarkBuildOpenAPI/merge-cold", "ns/op"), 1e-6)), fx(1, scaled(bm("BenchmarkBuildOpenAPI/merge-cold", "B/op"), mib)),
			fx(1, scaled(bm("BenchmarkBuildOpenAPI/merge-cold", "retained-bytes"), mib)),
			sig2(scaled(bm("BenchmarkBuildOpenAPI/merge-rebuild", "ns/op"), 1e-6)), sig2(scaled(bm("BenchmarkBuildOpenAPI/no-openapi", "ns/op"), 1e-6))}},
	{bench, "%s resource keys", []arg{d(bm("BenchmarkBuildOpenAPI/merge-cold", "resource-keys"))}},
	{bench, "%s us as JSON, %s us as protobuf once rendered (the rendering: %s ms, %s MiB allocated, once per document), %s us for a 304, %s us for a 301",
		[]arg{sig2(scaled(bm("BenchmarkOpenAPIDocument/json", "ns/op"), 1e-3)), sig2(scaled(bm("BenchmarkOpenAPIDocument/protobuf", "ns/op"), 1e-3)),
			fx(0, scaled(bm("BenchmarkOpenAPIProtobufRender", "ns/op"), 1e-6)), fx(0, scaled(bm("BenchmarkOpenAPIProtobufRender", "B/op"), mib)),
			sig2(scaled(bm("BenchmarkOpenAPIDocument/not-modified", "ns/op"), 1e-3)), sig2(scaled(bm("BenchmarkOpenAPIDocument/redirect", "ns/op"), 1e-3))}},
	{bench, "3 apiservers renewing their Leases cause %s rebuilds per minute", []arg{d(bm("BenchmarkRenewalRebuilds", "rebuilds/min"))}},
	{bench, "5000 forged Leases, all renewed and 50 re-held every round: the controller keeps %s MiB for them (their Lease objects, which an informer's cache holds, %s MiB), %s ms per round, %s rebuilds",
		[]arg{fx(1, bm("BenchmarkLeaseChurn", "MiB-controller-5000-leases")), fx(1, bm("BenchmarkLeaseChurn", "MiB-lease-objects")),
			sig2(scaled(bm("BenchmarkLeaseChurn", "ns/op"), 1e-6)), d(bm("BenchmarkLeaseChurn", "rebuilds/op"))}},
	{bench, "10 000 distinct `Accept` headers on `/apis` keep %s MiB, %s us per request",
		[]arg{fx(2, bm("BenchmarkDiscoveryDistinctAccept", "MiB-kept")), sig2(scaled(bm("BenchmarkDiscoveryDistinctAccept", "ns/request"), 1e-3))}},
}

// loadArgs are the gRPC round trip figures: p50 in us and p99 in ms, TCP then the unix socket, per rate.
func loadArgs() []arg {
	var args []arg
	for _, rate := range []int{2000, 5000, 10000} {
		for _, net := range []string{"tcp", "unix"} {
			name := fmt.Sprintf("BenchmarkProcessLoad/rate=%d/%s", rate, net)
			args = append(args, fx(0, bm(name, "p50-µs")), sig2(scaled(bm(name, "p99-µs"), 1e-3)))
		}
	}
	return args
}

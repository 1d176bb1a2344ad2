import Foundation
import Testing

/// docs/spec.md §12: metrics in Prometheus's text format — `basket-sync metrics`, and the file the
/// agent keeps at `"metrics"` — read back by a real parser (the Python client's, Debian's
/// python3-prometheus-client).
@Suite struct MetricsTests {
    /// The samples of an exposition as `name{labels}` → value, through the real parser; the
    /// parser's refusal fails the test.
    func parsed(_ text: String) throws -> [String: Double] {
        let input = FileManager.default.temporaryDirectory.appendingPathComponent("metrics-\(UUID().uuidString).prom")
        try Data(text.utf8).write(to: input)
        defer { try? FileManager.default.removeItem(at: input) }
        let run = try basketSync(["-c", """
            import sys
            from prometheus_client.parser import text_string_to_metric_families
            for family in text_string_to_metric_families(open(sys.argv[1]).read()):
                for sample in family.samples:
                    labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()) if k != "directory")
                    print(f"{sample.name}{{{labels}}} {sample.value}")
            """, input.path], executable: "/usr/bin/python3")
        #expect(run.status == 0, "the exposition parses: \(run.stderr)\n\(text)")
        var samples: [String: Double] = [:]
        for line in run.stdout.split(separator: "\n") {
            let parts = line.split(separator: " ")
            if parts.count == 2 { samples[String(parts[0])] = Double(parts[1]) }
        }
        return samples
    }

    @Test func theMetricsCommandPrintsWhatStatusCounts() throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        #expect(try basketSync(["-C", playground.path, "set-store", "s-1", "--mode", "retailer"]).status == 0)
        try playground.write("cart.json", cartJSON([("X", 1)], syncedThrough: 0))
        #expect(try basketSync(["-C", playground.path, "push", "A=+2"]).status == 0)
        #expect(try basketSync(["-C", playground.path, "push", "B=+1"]).status == 0)
        try playground.write("inbox/new/1.bad", "{")
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        #expect(try basketSync(["-C", playground.path, "handle-payment", "--total", "3", "--order-id", "o-1"]).status == 0)
        let run = try basketSync(["-C", playground.path, "metrics"])
        #expect(run.status == 0, "\(run.stderr)")
        let samples = try parsed(run.stdout)
        #expect(samples["basket_sync_records_total{file=outbox.jsonl}"] == 2, "\(samples)")
        #expect(samples["basket_sync_update_baskets_total{}"] == 2)
        #expect(samples["basket_sync_payments_total{status=recorded}"] == 1 || samples["basket_sync_payments_total{status=skipped}"] == 1)
        #expect(samples["basket_sync_pending_batches{}"] == 2)
        #expect(samples["basket_sync_bad_events{}"] == 1)
        #expect(samples["basket_sync_agent_up{}"] == 0 && samples["basket_sync_agent_state{state=none}"] == 1)
        #expect(run.stdout.contains("directory=\"\(playground.path)\""))
        // A tree: summed over its carts, and its carts by state.
        let other = try Playground()
        let tree = other.path + "/tree"
        #expect(try basketSync(["-C", tree, "init", "--tree"]).status == 0)
        for id in ["a", "b"] { #expect(try basketSync(["-C", tree + "/" + id, "push", "A=+1"]).status == 0) }
        #expect(try basketSync(["-C", tree, "sync"]).status == 0)
        let treeSamples = try parsed(try basketSync(["-C", tree, "metrics"]).stdout)
        #expect(treeSamples["basket_sync_records_total{file=outbox.jsonl}"] == 2 && treeSamples["basket_sync_carts{state=all}"] == 2, "\(treeSamples)")
    }

    /// A `basket-sync.json` every command refuses is refused by `metrics` too (78, its place on
    /// stderr), after the exposition it can give — the refusal counted among the errors — as
    /// `status` does: an unknown setting, a wrong value, a `"database"` that is no absolute path.
    @Test(arguments: [#"{"bogus": 1}"#, #"{"pendingTimeoutSeconds": -1}"#, #"{"database": "rel/db"}"#])
    func aRefusedConfigurationIsSaidByMetricsAsByEveryCommand(configuration: String) throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        try playground.write("basket-sync.json", configuration)
        let run = try basketSync(["-C", playground.path, "metrics"])
        #expect(run.status == 78 && run.stderr.contains("basket-sync.json:1:"), "\(configuration): \(run.status) \(run.stderr)")
        #expect(try parsed(run.stdout)["basket_sync_errors{}"] == 1, "\(run.stdout)")
    }

    /// A tree's counters sum every cart its database holds: they never go down (a reset, to
    /// Prometheus) while carts' folders are swapped, unreadable or moved away.
    @Test func aTreesCountersNeverGoDownWhileItsCartsFoldersAreOutOfReach() throws {
        let playground = try Playground()
        let tree = playground.path + "/tree"
        #expect(try basketSync(["-C", tree, "init", "--tree"]).status == 0)
        for (id, pushes) in [("a", 1), ("b", 2), ("c", 3)] {
            for push in 0..<pushes { #expect(try basketSync(["-C", tree + "/" + id, "push", "--id", "\(id)-\(push)", "A=+1"]).status == 0) }
        }
        #expect(try basketSync(["-C", tree, "sync"]).status == 0)
        let counters = ["basket_sync_records_total{file=outbox.jsonl}", "basket_sync_update_baskets_total{}"]
        func sampled() throws -> [Double?] {
            let samples = try parsed(try basketSync(["-C", tree, "metrics"]).stdout)
            return counters.map { samples[$0] }
        }
        func recordsSaid() throws -> Int? {
            let report = try JSONSerialization.jsonObject(with: Data(try basketSync(["-C", tree, "status", "--json"]).stdout.utf8)) as? [String: Any]
            return (report?["records"] as? [String: Any])?["outbox"] as? Int
        }
        #expect(try sampled() == [6, 6] && recordsSaid() == 6)
        func move(_ from: String, _ to: String) { #expect(rename(tree + "/" + from, tree + "/" + to) == 0, "\(from) → \(to)") }
        // a and b swapped: neither folder is read as its own.
        move("a", "x"); move("b", "a"); move("x", "b")
        #expect(try sampled() == [6, 6] && recordsSaid() == 6, "swapped")
        // c moved out of the tree too.
        move("c", "../c-away")
        #expect(try sampled() == [6, 6] && recordsSaid() == 6, "swapped, and one away")
        move("../c-away", "c")
        move("a", "x"); move("b", "a"); move("x", "b")
        #expect(try sampled() == [6, 6] && recordsSaid() == 6, "put back")
    }

    /// The agent keeps the file at `"metrics"` up to date, replaced whole: it parses whenever read.
    @Test func theAgentKeepsTheMetricsFile() async throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        try FileManager.default.createDirectory(atPath: playground.path + "/collector", withIntermediateDirectories: false)
        try playground.write("basket-sync.json", "{\"metrics\": \"collector/basket-sync.prom\"}")
        let agent = try AgentProcess(directory: playground.path, environment: ["BASKET_SYNC_HEARTBEAT_SECONDS": "0.2"])
        try await agent.waitUntilWatching()
        try await eventually("the agent writes its metrics, up") {
            (try? parsed(playground.read("collector/basket-sync.prom")))?["basket_sync_agent_up{}"] == 1
        }
        #expect(try basketSync(["-C", playground.path, "push", "A=+1"]).status == 0)
        try await eventually("the record is counted") {
            (try? parsed(playground.read("collector/basket-sync.prom")))?["basket_sync_records_total{file=outbox.jsonl}"] == 1
        }
        #expect(agent.stop() == 0)
        // Looked at once the agent stopped: while it runs, a rewrite's temp file may be there.
        #expect(playground.names("collector") == ["basket-sync.prom"], "no temp file left: \(playground.names("collector"))")
        // Stopped, it says so last: no agent up.
        let last = try parsed(playground.read("collector/basket-sync.prom"))
        #expect(last["basket_sync_agent_up{}"] == 0 && last["basket_sync_agent_state{state=none}"] == 1 && last["basket_sync_agent_state{state=running}"] == 0, "\(last)")
        #expect(last["basket_sync_records_total{file=outbox.jsonl}"] == 1, "every other sample kept: \(last)")
        let bad = try basketSync(["-C", playground.path, "validate", "basket-sync.json"])
        #expect(bad.status == 0, "\(bad)")
        try playground.write("basket-sync.json", "{\"metrics\": \"../x.txt\"}")
        #expect(try basketSync(["-C", playground.path, "status"]).status == 78)
    }

    /// A pass that comes within five seconds of the last write is written once they are over,
    /// not left for the next heartbeat (an hour here): the file never stays behind a pass.
    @Test func aPassRightAfterAWriteIsWrittenOnceItsIntervalIsOver() async throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        try FileManager.default.createDirectory(atPath: playground.path + "/collector", withIntermediateDirectories: false)
        try playground.write("basket-sync.json", "{\"metrics\": \"collector/basket-sync.prom\"}")
        let agent = try AgentProcess(directory: playground.path, environment: ["BASKET_SYNC_HEARTBEAT_SECONDS": "3600"])
        try await agent.waitUntilWatching()
        try await eventually("the agent writes its metrics at its start") {
            (try? parsed(playground.read("collector/basket-sync.prom")))?["basket_sync_errors{}"] == 0
        }
        // A cart that does not parse, renamed in (no command to wake the agent another way).
        try playground.write(".cart.tmp", "{\"products\": 3}")
        #expect(rename(playground.path + "/.cart.tmp", playground.path + "/cart.json") == 0)
        try await eventually("the rejection reaches the file", timeout: 30) {
            (try? parsed(playground.read("collector/basket-sync.prom")))?["basket_sync_errors{}"] == 1
        }
        #expect(agent.stop() == 0)
    }

    /// The metrics file's folder in the directory swapped for a link (another account of the
    /// directory's group may) is never written through: the file outside stays as it was, and
    /// the agent says why and goes on.
    @Test func theMetricsFileIsNeverWrittenThroughALinkedFolder() async throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        for folder in ["collector", "elsewhere"] { try FileManager.default.createDirectory(atPath: playground.path + "/" + folder, withIntermediateDirectories: false) }
        try playground.write("elsewhere/basket-sync.prom", "kept\n")
        try playground.write("basket-sync.json", "{\"metrics\": \"collector/basket-sync.prom\"}")
        #expect(rename(playground.path + "/collector", playground.path + "/collector.old") == 0)
        #expect(symlink("elsewhere", playground.path + "/collector") == 0)
        let agent = try AgentProcess(directory: playground.path, environment: ["BASKET_SYNC_HEARTBEAT_SECONDS": "0.2"])
        try await agent.waitUntilWatching()
        try await eventually("the agent says the metrics cannot be written") { agent.log.contains("metrics: ") }
        #expect(try basketSync(["-C", playground.path, "push", "A=+1"]).status == 0)
        try await eventually("the agent goes on") { playground.records("outbox.jsonl").count == 1 }
        #expect(agent.stop() == 0)
        #expect(playground.read("elsewhere/basket-sync.prom") == "kept\n" && playground.names("elsewhere") == ["basket-sync.prom"], "\(playground.names("elsewhere"))")
    }

    /// A metrics path outside the directory is followed as given, and judged again where its
    /// folder leads at each write: swapped for a link into the directory's `inbox/new/`, the
    /// agent writes nothing there (it would be delivered as an event) and says why; a link to a
    /// folder of the directory's own is written through the folders as in it, unfollowed.
    @Test func aMetricsFolderOutsideSwappedForALinkIntoTheDirectoryIsJudgedAtEachWrite() async throws {
        let playground = try Playground()
        let directory = playground.path + "/dir"
        #expect(try basketSync(["-C", directory, "init"]).status == 0)
        for folder in ["outside", "outside/collector", "dir/reports"] { try FileManager.default.createDirectory(atPath: playground.path + "/" + folder, withIntermediateDirectories: false) }
        let metrics = playground.path + "/outside/collector/basket-sync.prom"
        try playground.write("dir/basket-sync.json", "{\"metrics\": \"\(metrics)\"}")
        let agent = try AgentProcess(directory: directory, environment: ["BASKET_SYNC_HEARTBEAT_SECONDS": "0.2"])
        try await agent.waitUntilWatching()
        try await eventually("written where it is set") { (try? parsed(playground.read("outside/collector/basket-sync.prom")))?["basket_sync_agent_up{}"] == 1 }
        #expect(rename(playground.path + "/outside/collector", playground.path + "/outside/collector.old") == 0)
        #expect(symlink(directory + "/inbox/new", playground.path + "/outside/collector") == 0)
        try await eventually("the agent says where the folder leads") { agent.log.contains("now leads into") }
        #expect(try basketSync(["-C", directory, "push", "A=+1"]).status == 0)
        // The event's line is appended before its file is moved to cur/: waited for both.
        try await eventually("the agent goes on") { playground.records("dir/outbox.jsonl").count == 1 && playground.names("dir/inbox/new").isEmpty }
        #expect(playground.names("dir/inbox/bad").isEmpty && !playground.names("dir/inbox/cur").contains("basket-sync.prom"), "nothing written into the inbox: \(playground.names("dir/inbox/cur")) \(playground.names("dir/inbox/bad"))")
        // A link to a folder of the directory that is not basket-sync's: written there.
        #expect(unlink(playground.path + "/outside/collector") == 0 && symlink(directory + "/reports", playground.path + "/outside/collector") == 0)
        try await eventually("written through the link into the directory's own folder") { (try? parsed(playground.read("dir/reports/basket-sync.prom")))?["basket_sync_agent_up{}"] == 1 }
        #expect(agent.stop() == 0)
    }
}

import Foundation
import Testing

/// The benchmark runs and reports; no timing is asserted here (speed is the benchmark's to show).
@Suite struct BenchmarkTests {
    @Test func theQuickSettingProducesEveryTable() throws {
        let bench = buildDirectory.appendingPathComponent("basket-sync-bench").path
        let run = try basketSync(["--quick"], executable: bench)
        #expect(run.status == 0, "\(run.stderr)")
        for heading in ["### Cart renamed → notification line written, its record durable (50-line cart)", "### Inbox event renamed into new/ → outbox line written, its record durable",
                        "### Cart size → notification (p50)", "### Burst of 20 rewrites", "### Idle, 0.5 s with nothing happening"] {
            #expect(run.stdout.contains(heading), "missing: \(heading)")
        }
        #expect(run.stdout.contains("| basket-sync watch, new sync directory | "))
        #expect(run.stdout.contains("| floor: C inotify + read + fsync a record + append the line | "), "cc builds the floor")
        #expect(run.stdout.contains("the last version (A=500020) was the one notified last: yes"))
        #expect(run.stdout.contains("| 100 | "))
    }
}

extension BenchmarkTests {
    /// `--soak N` runs N events and N cart versions through one agent with retention and rotation
    /// on, and reports sizes at ten points; with rotation the JSON Lines files stay within
    /// (keep + 1) × maxBytes each, whatever N (no timing asserted).
    @Test func theSoakSettingReportsTenPointsAndBoundedFiles() throws {
        let bench = buildDirectory.appendingPathComponent("basket-sync-bench").path
        let run = try basketSync(["--soak", "200", "--retention-seconds", "0.5", "--rotate-bytes", "8000"], executable: bench)
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout.contains("## basket-sync soak: 200 events and 200 cart versions"))
        #expect(run.stdout.contains("p50 of the first tenth"))
        let rows = run.stdout.split(separator: "\n").filter { $0.hasPrefix("| ") && !$0.hasPrefix("| after") }
        #expect(rows.count == 10, "\(run.stdout)")
        // The JSON Lines column of the last row: three files, each at most keep + 1 = 3 parts past 8,000 bytes.
        let lines = rows.last.map { $0.split(separator: "|").map { $0.trimmingCharacters(in: .whitespaces) } } ?? []
        let kib = lines.count > 3 ? Int(lines[3].split(separator: " ").first ?? "") ?? .max : .max
        #expect(kib <= 3 * 3 * (8_000 + 2_000) / 1024, "JSON Lines files bounded by rotation: \(kib) KiB")
    }
}

extension BenchmarkTests {
    /// `--tree --quick` runs every phase of the tree benchmark over a few carts (no timing asserted):
    /// the first pass, the start, idle, single changes, a load, the polled tree, the disk probe.
    @Test func theTreeSettingRunsEveryPhase() throws {
        let bench = buildDirectory.appendingPathComponent("basket-sync-bench").path
        let run = try basketSync(["--tree", "--quick", "--carts", "20"], executable: bench)
        #expect(run.status == 0, "\(run.stderr)")
        for line in ["## basket-sync benchmark: a tree of 20 carts", "- first pass over 20 new carts",
                     "- agent start with nothing changed", "- idle ", "- one cart change → its notification line written, its record durable",
                     "| load | changes |", "- polled every 1000 ms", "- the disk here: ", "- throughput ceiling"] {
            #expect(run.stdout.contains(line), "missing: \(line)\n\(run.stdout)")
        }
        #expect(run.stdout.contains("Binary: ") && run.stdout.contains("the Swift runtime"), "says which build it ran")
        // Every change of the load was notified, and the last version of each cart was the one notified.
        let load = run.stdout.split(separator: "\n").first { $0.hasPrefix("| 20 /s") || $0.contains(" /s + ") }
        let cells = load.map { $0.split(separator: "|").map { $0.trimmingCharacters(in: .whitespaces) } } ?? []
        #expect(cells.suffix(2) == ["0", "0"], "nothing missed: \(load ?? "no load row")")
    }
}

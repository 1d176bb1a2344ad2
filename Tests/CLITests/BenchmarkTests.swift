import Foundation
import Testing

/// The benchmark runs and reports; no timing is asserted here (speed is the benchmark's to show).
@Suite struct BenchmarkTests {
    @Test func theQuickSettingProducesEveryTable() throws {
        let bench = binary.deletingLastPathComponent().appendingPathComponent("basket-sync-bench").path
        let run = try basketSync(["--quick"], executable: bench)
        #expect(run.status == 0, "\(run.stderr)")
        for heading in ["### Cart renamed → notification line durable (50-line cart)", "### Inbox event renamed into new/ → outbox line durable",
                        "### Cart size → notification (p50)", "### Burst of 20 rewrites", "### Idle, 0.5 s with nothing happening"] {
            #expect(run.stdout.contains(heading), "missing: \(heading)")
        }
        #expect(run.stdout.contains("| basket-sync watch, new sync directory | "))
        #expect(run.stdout.contains("| floor: C inotify + read + append + fsync | "), "cc builds the floor")
        #expect(run.stdout.contains("the last version (A=500020) was the one notified last: yes"))
        #expect(run.stdout.contains("| 100 | "))
    }
}

import Foundation
import Testing
import TestSupport

/// A sustained stream of cart rewrites and inbox events: memory stays flat, nothing is lost, the
/// last cart wins. `BASKET_SYNC_SOAK_SECONDS` sets how long (default 5; minutes for a real soak).
@Suite struct SoakTests {
    func residentKiB(_ pid: Int32) -> Int {
        let status = (try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)) ?? ""
        let line = status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") } ?? ""
        return Int(line.split(separator: " ").dropFirst().first ?? "") ?? 0
    }

    @Test func underSustainedLoadMemoryStaysFlatAndNothingIsLost() async throws {
        let seconds = Knobs.value("BASKET_SYNC_SOAK_SECONDS", default: 5.0)
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        let agent = try AgentProcess(directory: playground.path)
        try await agent.waitUntilWatching()
        let pid = agent.process.processIdentifier

        var carts = 0
        var events = 0
        var warm = 0
        let start = Date()
        // At least this many rewrites whatever the clock says (a loaded machine may spend the
        // whole time on a few), and the warm-up measured after a fifth of them, never skipped.
        let leastCarts = 200
        while Date().timeIntervalSince(start) < seconds || carts < leastCarts {
            if carts % 4 == 0 {
                let name = "e\(events).soak"
                try playground.write("inbox/tmp/\(name)", "{\"id\":\"e\(events)\",\"type\":\"basketDelta\",\"products\":[{\"id\":\"S\(events % 50)\",\"quantity\":1}]}")
                try FileManager.default.moveItem(at: playground.url("inbox/tmp/\(name)"), to: playground.url("inbox/new/\(name)"))
                events += 1
            }
            let lines = (0..<50).map { ("S\($0)", (carts + $0) % 7) }
            try playground.writeAtomically("cart.json", cartJSON(lines, syncedThrough: 0))
            carts += 1
            if carts == leastCarts / 5 { warm = residentKiB(pid) }
            try await Task.sleep(nanoseconds: 2_000_000)
        }
        let last = (0..<50).map { ("S\($0)", (carts - 1 + $0) % 7) }
        try await eventually("every event is taken") { playground.names("inbox/cur").count == events }
        // The Mealz-related lines are the SKUs the events pushed (still pending: this host never acks).
        let related = Set((0..<events).map { "S\($0 % 50)" })
        let expected = Dictionary(uniqueKeysWithValues: last.filter { related.contains($0.0) && $0.1 > 0 })
        try await eventually("the last cart is notified") { playground.records("notifications.jsonl").last.map(products) == expected }
        let end = residentKiB(pid)
        #expect(agent.stop() == 0)
        let outbox = playground.records("outbox.jsonl")
        #expect(outbox.count == events)
        #expect(Set(outbox.compactMap { $0["source"] as? String }).count == events)
        #expect(end - warm < 8 * 1024, "resident memory grew from \(warm) KiB to \(end) KiB")
        print("soak: \(seconds) s, \(carts) carts and \(events) events, resident \(warm) KiB after warm-up, \(end) KiB at the end")
    }
}

import Foundation
import Testing

/// Every sample, run end to end as its README says, with its result checked.
@Suite struct SampleTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// Runs a sample with the built binaries first on the PATH.
    func sample(_ executable: String, _ arguments: [String] = []) throws -> Run {
        let path = binary.deletingLastPathComponent().path + ":" + (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin")
        return try basketSync(arguments, environment: ["PATH": path], executable: executable)
    }

    func path(_ relative: String) -> String { Self.root.appendingPathComponent(relative).path }

    @Test func shellHost() throws {
        let playground = try Playground()
        let run = try sample(path("Samples/shell-host/demo.sh"), [playground.path])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout.contains("cart before checkout: [{\"id\":\"bread\",\"quantity\":1},{\"id\":\"pasta\",\"quantity\":2},{\"id\":\"tomato\",\"quantity\":2},{\"id\":\"basil\",\"quantity\":1}]"))
        #expect(run.stdout.contains("cart after checkout: []"))
        let payments = playground.records("payments.jsonl")
        #expect(payments.map { $0["type"] as! String } == ["paymentStarted", "handlePayment"])
        #expect(payments.allSatisfy { $0["orderId"] as? String == "order-7" && $0["status"] as? String == "recorded" })
        let mealz = (payments.last?["mealzProducts"] as? [[String: Any]])?.map { "\($0["id"]!)=\($0["quantity"]!)" }
        #expect(mealz == ["pasta=2", "tomato=2", "basil=1"], "the shopper's bread is not Mealz's")
        let cart = try JSONSerialization.jsonObject(with: Data(playground.read("cart.json").utf8)) as! [String: Any]
        #expect(cart["syncedThrough"] as? Int == 2)
    }

    @Test func cron() throws {
        let playground = try Playground()
        let directory = playground.path + "/shop"
        let wrapper = path("Samples/cron/basket-sync-cron")
        let first = try sample(wrapper, [directory])
        #expect(first.status == 0, "\(first.stderr)")
        #expect(playground.read("shop/basket-sync.json").contains("\"pendingTimeoutSeconds\": 180"))
        #expect(try basketSync(["-C", directory, "push", "--id", "e1", "A=+1"]).status == 0)
        try playground.write("shop/cart.json", cartJSON([("X", 1)]))
        let second = try sample(wrapper, [directory])
        #expect(second.status == 0)
        #expect(second.stdout.range(of: #"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \{"cart":"taken","inbox":\{"taken":1,"duplicates":0,"bad":0\}\}\n$"#, options: .regularExpression) != nil, "log line: \(second.stdout)")
        #expect(playground.records("shop/outbox.jsonl").count == 1)
        let status = try JSONSerialization.jsonObject(with: Data(try basketSync(["-C", directory, "status", "--json"]).stdout.utf8)) as! [String: Any]
        let deadline = (status["pending"] as! [[String: Any]]).first?["deadline"] as? String
        #expect(deadline != nil, "a host without syncedThrough gets the 180 s window")
        try playground.write("shop/cart.json", "{\"products\": 3}")
        let bad = try sample(wrapper, [directory])
        #expect(bad.status == 65)
        #expect(bad.stderr.contains("cart.json:1:14: \"products\" must be an array of lines, not a number"))
    }

    @Test func systemd() async throws {
        let unit = try String(contentsOfFile: path("Samples/systemd/basket-sync@.service"), encoding: .utf8)
        func value(_ key: String) -> String? {
            unit.split(separator: "\n").first { $0.hasPrefix(key + "=") }.map { String($0.dropFirst(key.count + 1)) }
        }
        #expect(value("Restart") == "on-failure")
        #expect(value("WorkingDirectory") == "/srv/basket-sync/%i")
        #expect(value("KillSignal") == "SIGTERM")
        let playground = try Playground()
        let directory = playground.path + "/shop1"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        // The unit's own command lines, with the built binary in place of /usr/local/bin/basket-sync.
        func command(_ key: String) throws -> [String] {
            let line = try #require(value(key))
            return line.split(separator: " ").map { $0 == "/usr/local/bin/basket-sync" ? binary.path : String($0) }
        }
        let pre = try command("ExecStartPre")
        #expect(try basketSync(Array(pre.dropFirst()), in: directory).status == 0)
        let start = try command("ExecStart")
        #expect(start.first == binary.path)
        let agent = try AgentProcess(directory: directory, arguments: Array(start.dropFirst(2)))
        try await agent.waitUntilWatching()
        #expect(agent.log.contains("\"level\":\"info\""), "the unit logs JSON for journalctl | jq")
        #expect(agent.stop(SIGTERM) == 0)
        if FileManager.default.isExecutableFile(atPath: "/usr/bin/systemd-analyze") {
            let verify = try sample("/usr/bin/systemd-analyze", ["verify", path("Samples/systemd/basket-sync@.service")])
            #expect(!verify.stderr.contains("Unknown key"), "\(verify.stderr)")
        }
    }

    @Test func sandbox() throws {
        let playground = try Playground()
        let run = try sample(path("Samples/sandbox/sandbox.sh"), [playground.path + "/sandbox"])
        #expect(run.status == 0, "\(run.stdout)\n\(run.stderr)")
        #expect(run.stdout.contains("converged: both sides hold the same Mealz lines, nothing pending"))
        #expect(run.stdout.contains("host cart, Mealz lines: [{\"id\":\"basil\",\"quantity\":1},{\"id\":\"pasta\",\"quantity\":1}]"))
        #expect(run.stdout.contains("counters: 3 updateBasket"))
    }

    @Test func swiftHost() throws {
        let run = try sample(binary.deletingLastPathComponent().appendingPathComponent("swift-host-sample").path)
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout.contains("host cart:    bread=1 pasta=2 tomato=2\nMealz's view: pasta=2 tomato=2\nconverged\n"))
        #expect(run.stdout.contains("paid: order-7; the next cart starts Mealz basket 2"))
    }
}

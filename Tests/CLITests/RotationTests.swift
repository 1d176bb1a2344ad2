import Foundation
import Testing

/// `"rotate"` — past maxBytes a JSON Lines file becomes NAME.1 (… NAME.keep), and the
/// next record starts a new NAME: `keep` files kept, no seq ever written twice or lost across them.
@Suite struct RotationTests {
    func seqs(_ playground: Playground, _ name: String) -> [Int] {
        playground.read(name).split(separator: "\n").compactMap { line in
            (try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])?["seq"] as? Int
        }
    }

    @Test(arguments: [false, true])
    func rotatedFilesKeepEveryRecordOnceAndOnlyKeepFiles(agentRunning: Bool) async throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        try playground.write("basket-sync.json", "{\"rotate\": {\"maxBytes\": 600, \"keep\": 2}}")
        let agent = agentRunning ? try AgentProcess(directory: playground.path) : nil
        if let agent { try await agent.waitUntilWatching() }
        for index in 1...30 {
            #expect(try basketSync(["-C", playground.path, "push", "--id", "e\(index)", "A=+1"]).status == 0)
            if agent == nil { #expect(try basketSync(["-C", playground.path, "sync"]).status == 0) }
        }
        try await eventually("every record is in a file") {
            (seqs(playground, "outbox.jsonl.2") + seqs(playground, "outbox.jsonl.1") + seqs(playground, "outbox.jsonl")).last == 30
        }
        if let agent { #expect(agent.stop() == 0) }
        let rotated = seqs(playground, "outbox.jsonl.2") + seqs(playground, "outbox.jsonl.1")
        let all = rotated + seqs(playground, "outbox.jsonl")
        #expect(!all.isEmpty && all == Array(all.first!...30), "in order, each once, none missing from the oldest kept: \(all)")
        #expect(all.first! > 1, "older files beyond keep are dropped: \(all.first!)")
        #expect(!FileManager.default.fileExists(atPath: playground.path + "/outbox.jsonl.3"), "keep is 2")
        for name in ["outbox.jsonl.1", "outbox.jsonl.2"] {
            let size = (try? FileManager.default.attributesOfItem(atPath: playground.path + "/" + name)[.size] as? Int) ?? 0
            #expect(size > 600 && size < 600 + 400, "\(name) was rotated just past maxBytes: \(size)")
        }
        // The commands and the agent read on from the new file: nothing more is written again.
        _ = try basketSync(["-C", playground.path, "push", "--id", "e31", "A=+1"])
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        let after = seqs(playground, "outbox.jsonl.2") + seqs(playground, "outbox.jsonl.1") + seqs(playground, "outbox.jsonl")
        #expect(after.last == 31 && Set(after).count == after.count, "\(after)")
        #expect(try basketSync(["-C", playground.path, "status"]).status == 0)
    }

    @Test func aBadRotateSettingIsAConfigurationError() throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        for bad in ["{\"rotate\": 5}", "{\"rotate\": {\"maxBytes\": 0}}", "{\"rotate\": {\"keep\": 0}}", "{\"rotate\": {\"size\": 1}}"] {
            try playground.write("basket-sync.json", bad)
            #expect(try basketSync(["-C", playground.path, "sync"]).status == 78, "\(bad)")
        }
        try playground.write("basket-sync.json", "{\"rotate\": null}")
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
    }

    /// A record committed but never appended (the append's fsync failed, as a crash between the
    /// commit and the append leaves it) reaches the file after a rotation — basket-sync's own, or
    /// logrotate's moving the file away meanwhile — once, in order, never twice across files.
    @Test(arguments: [false, true])
    func aRecordLeftUnpublishedReachesTheNewFileAfterARotation(movedAway: Bool) async throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        try playground.write("basket-sync.json", "{\"rotate\": {\"maxBytes\": 600, \"keep\": 50}}")
        for index in 1...3 {
            #expect(try basketSync(["-C", playground.path, "push", "--id", "e\(index)", "A=+1"]).status == 0)
            #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        }
        let flag = playground.path + "/fault-on"
        try playground.write("fault-on", "")
        #expect(try basketSync(["-C", playground.path, "push", "--id", "lost", "A=+1"]).status == 0)
        let failed = try basketSync(["-C", playground.path, "sync"], environment: [
            "LD_PRELOAD": FaultTests.shim, "FAULTSHIM_EIO": "outbox.jsonl", "FAULTSHIM_WHILE": flag,
        ])
        #expect(failed.status != 0 && failed.stderr.contains("Input/output error"), "\(failed.stderr)")
        #expect(!playground.read("outbox.jsonl").contains("\"lost\""), "committed, not in the file")
        try FileManager.default.removeItem(atPath: flag)
        if movedAway {
            try FileManager.default.moveItem(atPath: playground.path + "/outbox.jsonl", toPath: playground.path + "/outbox.jsonl.1")
        }
        for index in 5...20 {
            #expect(try basketSync(["-C", playground.path, "push", "--id", "e\(index)", "A=+1"]).status == 0)
            #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        }
        let files = (1...50).reversed().map { "outbox.jsonl.\($0)" }.filter { FileManager.default.fileExists(atPath: playground.path + "/" + $0) } + ["outbox.jsonl"]
        #expect(files.count > 2, "rotated: \(files)")
        let records = files.flatMap { playground.records($0) }
        let seqs = records.compactMap { $0["seq"] as? Int }
        #expect(seqs == Array(1...20), "every seq once, in order, across \(files): \(seqs)")
        #expect(records.filter { $0["source"] as? String == "lost" }.count == 1, "the unpublished record reached a file once")
    }
    /// The live files — NAME.1 and NAME — hold every record once, whatever a rotator did between
    /// two appends: logrotate's `create` finding the file basket-sync had just made in its way
    /// (moved aside to a .backup), `copytruncate` cutting what came after its copy. The records
    /// that left are written again, once, and said.
    @Test(arguments: ["create moves ours aside", "copytruncate"])
    func theLiveFilesStayWholeWhateverTheRotatorDid(rotator: String) throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        func deliver(_ index: Int) throws -> Run {
            #expect(try basketSync(["-C", playground.path, "push", "--id", "e\(index)", "A=+1"]).status == 0)
            return try basketSync(["-C", playground.path, "sync"])
        }
        for index in 1...3 { #expect(try deliver(index).status == 0) }
        let live = playground.path + "/outbox.jsonl"
        let saying: String
        if rotator == "copytruncate" {
            // The copy, then a record appended before the cut, then the cut (same file, emptied).
            try FileManager.default.copyItem(atPath: live, toPath: live + ".1")
            #expect(try deliver(4).status == 0)
            #expect(truncate(live, 0) == 0)
            saying = "shrank under basket-sync"
        } else {
            // logrotate: rename; basket-sync appends record 4 before logrotate's create, making the
            // file anew; create finds it in its way, moves it to a .backup, makes an empty one.
            try FileManager.default.moveItem(atPath: live, toPath: live + ".1")
            #expect(try deliver(4).status == 0)
            try FileManager.default.moveItem(atPath: live, toPath: live + "-20261202.backup")
            try playground.write("outbox.jsonl", "")
            saying = "records 4…4 had left the live files"
        }
        let fifth = try deliver(5)
        #expect(fifth.status == 0 && fifth.stderr.contains(saying), "\(fifth.stderr)")
        let all = seqs(playground, "outbox.jsonl.1") + seqs(playground, "outbox.jsonl")
        #expect(all == [1, 2, 3, 4, 5], "every record once in the live files: \(all)")
        // And on from there: nothing written twice.
        #expect(try deliver(6).status == 0)
        #expect(seqs(playground, "outbox.jsonl.1") + seqs(playground, "outbox.jsonl") == [1, 2, 3, 4, 5, 6])
    }
}

extension RotationTests {
    /// `keep` lowered (in the settings a one-shot command reads, or a running agent reloads on
    /// SIGHUP): the next rotation leaves `keep` parts, the ones past it removed — none older
    /// than those kept is left behind a gap.
    @Test(arguments: [false, true])
    func keepLoweredLeavesKeepParts(agentRunning: Bool) async throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        try playground.write("basket-sync.json", #"{"rotate": {"maxBytes": 300, "keep": 4}}"#)
        let agent = agentRunning ? try AgentProcess(directory: playground.path) : nil
        if let agent { try await agent.waitUntilWatching() }
        var pushed = 0
        func push(until condition: () -> Bool) async throws {
            while !condition(), pushed < 200 {
                pushed += 1
                #expect(try basketSync(["-C", playground.path, "push", "--id", "e\(pushed)", "A=+1"]).status == 0)
                if agent == nil { #expect(try basketSync(["-C", playground.path, "sync"]).status == 0) }
                try await eventually("record \(pushed) is in the outbox") {
                    (seqs(playground, "outbox.jsonl.1") + seqs(playground, "outbox.jsonl")).last == pushed
                }
            }
        }
        func exists(_ name: String) -> Bool { FileManager.default.fileExists(atPath: playground.path + "/" + name) }
        try await push { exists("outbox.jsonl.4") }
        try playground.write("basket-sync.json", #"{"rotate": {"maxBytes": 300, "keep": 2}}"#)
        if let agent {
            kill(agent.process.processIdentifier, SIGHUP)
            try await eventually("the settings are reloaded") { agent.log.contains("reloaded basket-sync.json") }
        }
        let before = pushed
        try await push { pushed > before && !exists("outbox.jsonl.3") }
        #expect(!exists("outbox.jsonl.3") && !exists("outbox.jsonl.4"), "keep is 2 now")
        let all = seqs(playground, "outbox.jsonl.2") + seqs(playground, "outbox.jsonl.1") + seqs(playground, "outbox.jsonl")
        #expect(!all.isEmpty && all == Array(all.first!...pushed), "the parts kept follow on, in order, each record once: \(all)")
        if let agent { #expect(agent.stop() == 0) }
    }
}

extension RotationTests {
    /// A part rotation would move along that is not basket-sync's — a directory planted under
    /// `NAME.2`, another account's file — stops the rotation before anything moves (never an
    /// object of someone else's moved along the chain); the file grows, and `status`, its health
    /// and the metrics say why and what to do until the part is moved away; then rotation goes
    /// on, every record once, in order.
    @Test func aPartThatIsNotBasketSyncsStopsRotationAndIsSaid() throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        try playground.write("basket-sync.json", #"{"rotate": {"maxBytes": 300, "keep": 2}}"#)
        var pushed = 0
        func push(_ count: Int) throws -> Run {
            var last = Run(status: 0, stdout: "", stderr: "")
            for _ in 0..<count {
                pushed += 1
                #expect(try basketSync(["-C", playground.path, "push", "--id", "e\(pushed)", "A=+1"]).status == 0)
                last = try basketSync(["-C", playground.path, "sync"])
                #expect(last.status == 0, "\(last.stderr)")
            }
            return last
        }
        func databaseError() throws -> String? {
            let status = try basketSync(["-C", playground.path, "status", "--json"])
            let health = (try JSONSerialization.jsonObject(with: Data(status.stdout.utf8)) as? [String: Any])?["health"] as? [String: Any]
            return (health?["errors"] as? [String: Any])?["database"] as? String
        }
        func size(_ name: String) -> Int { (try? FileManager.default.attributesOfItem(atPath: playground.path + "/" + name)[.size] as? Int) ?? 0 }
        while !FileManager.default.fileExists(atPath: playground.path + "/outbox.jsonl.1") { _ = try push(1) }
        let firstPart = playground.read("outbox.jsonl.1")
        for plant in ["directory", "another account's file"] {
            if plant == "directory" {
                try FileManager.default.createDirectory(atPath: playground.path + "/outbox.jsonl.2", withIntermediateDirectories: false)
                try playground.write("outbox.jsonl.2/theirs", "keep me")
            } else {
                try FileManager.default.removeItem(atPath: playground.path + "/outbox.jsonl.2")
                try playground.write("outbox.jsonl.2", "theirs\n")
                #expect(chown(playground.path + "/outbox.jsonl.2", 4212, 4212) == 0)
            }
            let said = try push(8)
            #expect(said.stderr.contains("outbox.jsonl.2: is ") && said.stderr.contains("until it is moved away"), "\(plant): \(said.stderr)")
            #expect(size("outbox.jsonl") > 300 && playground.read("outbox.jsonl.1") == firstPart, "\(plant): nothing moved, the file grows")
            let error = try databaseError()
            #expect(error?.contains("outbox.jsonl.2: is \(plant == "directory" ? "a directory" : "owned by uid 4212")") == true, "\(plant): \(String(describing: error))")
            let metrics = try basketSync(["-C", playground.path, "metrics"])
            #expect(metrics.stdout.contains("basket_sync_errors{directory=\"\(playground.path)\"} 1"), "\(metrics.stdout)")
        }
        #expect(playground.read("outbox.jsonl.2") == "theirs\n")
        try FileManager.default.removeItem(atPath: playground.path + "/outbox.jsonl.2")
        _ = try push(1)
        #expect(try databaseError() == nil && size("outbox.jsonl") <= 300, "moved away: rotated again")
        let all = seqs(playground, "outbox.jsonl.2") + seqs(playground, "outbox.jsonl.1") + seqs(playground, "outbox.jsonl")
        #expect(all == Array(all.first!...pushed), "every record once, in order: \(all)")
    }

    /// Past `NAME.keep`, rotation removes only its own parts (left by a larger `keep` before):
    /// another account's file there, or a link (whatever it leads to), is left as it is — never
    /// removed, even where basket-sync's account could — and `status` lists it with what to do;
    /// the rotation itself goes on.
    @Test func partsPastKeepThatAreNotBasketSyncsAreLeftAndSaid() throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        try playground.write("basket-sync.json", #"{"rotate": {"maxBytes": 300, "keep": 2}}"#)
        var pushed = 0
        func push() throws {
            pushed += 1
            #expect(try basketSync(["-C", playground.path, "push", "--id", "e\(pushed)", "A=+1"]).status == 0)
            #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        }
        while !FileManager.default.fileExists(atPath: playground.path + "/outbox.jsonl.1") { try push() }
        try playground.write("outbox.jsonl.3", "theirs\n")
        #expect(chown(playground.path + "/outbox.jsonl.3", 4212, 4212) == 0)
        try playground.write("target", "the link's target\n")
        #expect(symlink(playground.path + "/target", playground.path + "/outbox.jsonl.4") == 0)
        try playground.write("outbox.jsonl.5", "ours, left by a larger keep\n")
        let before = playground.read("outbox.jsonl.1")
        while playground.read("outbox.jsonl.1") == before { try push() }
        #expect(playground.read("outbox.jsonl.3") == "theirs\n", "another account's file is left")
        #expect((try? FileManager.default.destinationOfSymbolicLink(atPath: playground.path + "/outbox.jsonl.4")) == playground.path + "/target" && playground.read("target") == "the link's target\n", "the link is left, and what it leads to")
        #expect(!FileManager.default.fileExists(atPath: playground.path + "/outbox.jsonl.5"), "its own part past keep is removed")
        let status = try basketSync(["-C", playground.path, "status", "--json"])
        let foreign = ((try JSONSerialization.jsonObject(with: Data(status.stdout.utf8)) as? [String: Any])?["foreignParts"] as? [String]) ?? []
        #expect(foreign.contains { $0.contains("outbox.jsonl.3: is owned by uid 4212") && $0.contains("move it away") }
                && foreign.contains { $0.contains("outbox.jsonl.4: is a symbolic link") }, "\(foreign)")
    }
}

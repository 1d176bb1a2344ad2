import Foundation
import Testing
import TestSupport

/// One fsync per change (docs/spec.md §6): a line is written after its record's commit and
/// flushed later, so a power cut may take back lines — a torn tail, every line since the last
/// flush, the whole file when it was new. The next start after the machine's restart writes them
/// again, the same bytes under the same seq. A power cut cannot be made here: the agent is told
/// never to flush (`BASKET_SYNC_FLUSH_SECONDS`), killed, the files cut as the disk could have left
/// them, and the next command told it runs on another boot (`BASKET_SYNC_BOOT_ID`).
@Suite struct PowerCutTests {
    func deliver(_ playground: Playground, _ id: String, sku: String, quantity: Int, cart: String = "") throws {
        try playground.write("\(cart)inbox/tmp/\(id)", "{\"id\":\"\(id)\",\"type\":\"basketDelta\",\"products\":[{\"id\":\"\(sku)\",\"quantity\":\(quantity)}]}\n")
        try FileManager.default.moveItem(at: playground.url("\(cart)inbox/tmp/\(id)"), to: playground.url("\(cart)inbox/new/\(id)"))
    }

    /// What a power cut may leave of a file whose bytes from `flushed` on were not flushed: any
    /// prefix of them (a torn line too); a file new since the last flush may be gone altogether;
    /// its size kept with zeros where the lines were (a file system that writes the size before
    /// the data); or nothing lost at all.
    enum Cut: CaseIterable { case torn, lineBoundary, allUnflushed, fileGone, zeroed, intact }

    func cut(_ path: String, flushed: Int, _ shape: Cut, rng: inout SplitMix64) throws {
        let bytes = try Data(contentsOf: URL(fileURLWithPath: path))
        let keep: Int
        switch shape {
        case .fileGone where flushed == 0:
            try FileManager.default.removeItem(atPath: path)
            return
        case .torn:
            keep = Int.random(in: flushed...bytes.count, using: &rng)
        case .lineBoundary:
            let ends = [flushed] + bytes.indices.filter { $0 >= flushed && bytes[$0] == UInt8(ascii: "\n") }.map { $0 + 1 }
            keep = ends.randomElement(using: &rng)!
        case .allUnflushed, .fileGone:
            keep = flushed
        case .zeroed:
            try (bytes.prefix(flushed) + Data(count: bytes.count - flushed)).write(to: URL(fileURLWithPath: path))
            return
        case .intact:
            return
        }
        try bytes.prefix(keep).write(to: URL(fileURLWithPath: path))
    }

    /// In a sync directory, and in a tree's cart (the tree's `sync` flushes every cart's lines
    /// with one `syncfs`, its agent likewise).
    @Test(arguments: [false, true])
    func linesAPowerCutTookAreWrittenAgainByteForByte(tree: Bool) async throws {
        let seed = Knobs.seed
        var rng = SplitMix64(seed: seed)
        for trial in 0..<6 {
            let context = "seed \(seed) (replay: BASKET_SYNC_SEED=\(seed)), \(tree ? "tree" : "sync directory"), trial \(trial)"
            let playground = try Playground()
            #expect(try basketSync(["-C", playground.path, "init"] + (tree ? ["--tree"] : [])).status == 0)
            let cart = tree ? "c1/" : ""
            if tree {
                for folder in ["c1", "c1/inbox", "c1/inbox/new", "c1/inbox/tmp"] { try FileManager.default.createDirectory(at: playground.url(folder), withIntermediateDirectories: true) }
            }
            // Half the trials start from lines a one-shot sync flushed (they survive any cut).
            var events = 0
            if Bool.random(using: &rng) {
                for _ in 0..<Int.random(in: 1...5, using: &rng) {
                    try deliver(playground, "before\(events)", sku: "S\(events % 3)", quantity: events + 1, cart: cart)
                    events += 1
                }
                try playground.writeAtomically("\(cart)cart.json", cartJSON([("S0", 1)], syncedThrough: 0))
                #expect(try basketSync(["-C", playground.path, "sync"]).status == 0, "\(context)")
            }
            let files = ["\(cart)outbox.jsonl", "\(cart)notifications.jsonl"]
            let flushed = files.map { (try? Data(contentsOf: playground.url($0)))?.count ?? 0 }

            // The agent never flushes; what it writes is in the page cache only, as far as a power cut goes.
            let agent = try AgentProcess(directory: playground.path, environment: ["BASKET_SYNC_FLUSH_SECONDS": "3600"])
            try await agent.waitUntilWatching()
            let more = Int.random(in: 1...20, using: &rng)
            for step in 0..<more {
                try deliver(playground, "during\(step)", sku: "S\(step % 4)", quantity: step % 5 + 1, cart: cart)
                if step % 3 == 0 { try playground.writeAtomically("\(cart)cart.json", cartJSON([("S0", step + 2), ("X", 1)], syncedThrough: 0)) }
            }
            events += more
            try await eventually("\(context): every event in the outbox") { playground.records("\(cart)outbox.jsonl").count == events }
            try await eventually("\(context): the last cart notified") {
                playground.records("\(cart)notifications.jsonl").last.map { products($0)["S0"] == ((more - 1) / 3 * 3 + 2) } ?? false
            }
            #expect(agent.stop(SIGKILL) == SIGKILL)
            let whole = files.map { (try? Data(contentsOf: playground.url($0))) ?? Data() }

            // The power cut: each file cut as the disk may have left it.
            var shapes: [Cut] = []
            for (file, flushedBytes) in zip(files, flushed) {
                let shape = Cut.allCases.randomElement(using: &rng)!
                shapes.append(shape)
                try cut(playground.url(file).path, flushed: flushedBytes, shape, rng: &rng)
            }

            // The machine started again: the next command writes back what was taken, once.
            let again = try basketSync(["-C", playground.path, "sync"], environment: ["BASKET_SYNC_BOOT_ID": "after-the-power-cut-\(trial)"])
            #expect(again.status == 0, "\(context): \(again.stderr)")
            for (index, file) in files.enumerated() {
                let now = (try? Data(contentsOf: playground.url(file))) ?? Data()
                #expect(now == whole[index], "\(context): \(file) cut as \(shapes[index]) is whole again, byte for byte\n\(String(decoding: now, as: UTF8.self))\n---\n\(String(decoding: whole[index], as: UTF8.self))")
            }
            #expect(!again.stderr.contains("copytruncate"), "\(context): a power cut is not read as an interference: \(again.stderr)")
        }
    }

    /// A file a rotator moves away (logrotate's nocreate: a rename) while its lines wait for
    /// their flush is fsynced before the next file gets a line: a power cut cannot keep a later
    /// line in the new file and lose an earlier one in the part that was moved.
    @Test func aFileMovedAwayIsDurableBeforeTheNextFileGetsALine() async throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        let log = playground.path + "/shim.log"
        let agent = try AgentProcess(directory: playground.path, environment: [
            "BASKET_SYNC_FLUSH_SECONDS": "3600", "LD_PRELOAD": FaultTests.shim, "FAULTSHIM_LOG": log,
        ])
        try await agent.waitUntilWatching()
        try deliver(playground, "e1", sku: "A", quantity: 1)
        try await eventually("the first line") { playground.records("outbox.jsonl").count == 1 }
        try FileManager.default.moveItem(at: playground.url("outbox.jsonl"), to: playground.url("outbox.jsonl.1"))
        try deliver(playground, "e2", sku: "A", quantity: 1)
        try await eventually("the next line, in a new file") { playground.records("outbox.jsonl").count == 1 }
        #expect(agent.stop(SIGKILL) == SIGKILL)
        let steps = playground.read("shim.log").split(separator: "\n").map { $0.split(separator: " ").map(String.init) }
        let moved = steps.firstIndex { $0.count > 1 && $0[0] == "fsync" && $0[1].hasSuffix("/outbox.jsonl.1") }
        let next = steps.lastIndex { $0.count > 1 && $0[0] == "write" && $0[1].hasSuffix("/outbox.jsonl") }
        #expect(moved != nil && next != nil && moved! < next!, "the moved part fsynced (\(String(describing: moved))) before the new file's line (\(String(describing: next))):\n\(playground.read("shim.log"))")
    }

    /// basket-sync's own rotation fsyncs the file before it renames it: a rotated part holds
    /// its records whatever a power cut does to the lines after it.
    @Test func aPartRotatedByBasketSyncIsDurableBeforeItIsRenamed() throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        try playground.write("basket-sync.json", #"{"rotate": {"maxBytes": 200, "keep": 9}}"#)
        for index in 0..<6 { try deliver(playground, "e\(index)", sku: "A", quantity: 1) }
        let log = playground.path + "/shim.log"
        #expect(try basketSync(["-C", playground.path, "sync"], environment: ["LD_PRELOAD": FaultTests.shim, "FAULTSHIM_LOG": log]).status == 0)
        let steps = playground.read("shim.log").split(separator: "\n").map { $0.split(separator: " ").map(String.init) }
        let renames = steps.indices.filter { steps[$0].count > 2 && steps[$0][0] == "rename" && steps[$0][1].hasSuffix("/outbox.jsonl") }
        #expect(!renames.isEmpty, "the outbox was rotated: \(playground.names(""))")
        for rename in renames {
            let lastWrite = steps[..<rename].lastIndex { $0.count > 1 && $0[0] == "write" && $0[1].hasSuffix("/outbox.jsonl") }
            let fsync = steps[..<rename].lastIndex { $0.count > 1 && $0[0] == "fsync" && $0[1].hasSuffix("/outbox.jsonl") }
            #expect(lastWrite != nil && fsync != nil && lastWrite! < fsync!, "written, fsynced, then renamed: \(steps[..<(rename + 1)])")
        }
    }

    /// Without a restart of the machine (a killed process keeps its lines in the page cache), a
    /// file a host deletes after reading it is not given its records again.
    @Test func withoutARestartADeletedFileIsNotGivenItsRecordsAgain() async throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        let agent = try AgentProcess(directory: playground.path, environment: ["BASKET_SYNC_FLUSH_SECONDS": "3600"])
        try await agent.waitUntilWatching()
        for step in 0..<3 { try deliver(playground, "e\(step)", sku: "S", quantity: 1) }
        try await eventually("three records") { playground.records("outbox.jsonl").count == 3 }
        #expect(agent.stop(SIGKILL) == SIGKILL)
        try FileManager.default.removeItem(at: playground.url("outbox.jsonl"))
        try deliver(playground, "e3", sku: "S", quantity: 1)
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        #expect(playground.records("outbox.jsonl").map { $0["seq"] as? Int } == [4])
    }

    /// After a restart of the machine, the lines an agent's flush made durable are known to be on
    /// disk — by the flush's one note for their file system — so a file its host read and deleted
    /// is not given its records again: only the next record starts it. In a sync directory and
    /// in a tree's carts (many files, one `syncfs`).
    @Test(arguments: [false, true])
    func afterARestartAFileTheAgentFlushedAndItsHostDeletedIsNotGivenItsRecordsAgain(tree: Bool) async throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"] + (tree ? ["--tree"] : [])).status == 0)
        let carts = tree ? ["c1/", "c2/", "c3/"] : [""]
        if tree {
            for cart in carts {
                for folder in ["", "inbox", "inbox/new", "inbox/tmp"] { try FileManager.default.createDirectory(at: playground.url(cart + folder), withIntermediateDirectories: true) }
            }
        }
        let agent = try AgentProcess(directory: playground.path, environment: ["BASKET_SYNC_FLUSH_SECONDS": "0.2"])
        try await agent.waitUntilWatching()
        for cart in carts {
            for step in 0..<3 { try deliver(playground, "e\(step)", sku: "S", quantity: 1, cart: cart) }
        }
        for cart in carts { try await eventually("\(cart): three records") { playground.records("\(cart)outbox.jsonl").count == 3 } }
        // The flushes are over once the agent has stopped (the last one waited for).
        #expect(agent.stop(SIGTERM) == 0)
        for cart in carts { try FileManager.default.removeItem(at: playground.url("\(cart)outbox.jsonl")) }
        for cart in carts { try deliver(playground, "e3", sku: "S", quantity: 1, cart: cart) }
        let again = try basketSync(["-C", playground.path, "sync"], environment: ["BASKET_SYNC_BOOT_ID": "after-a-restart"])
        #expect(again.status == 0, "\(again.stderr)")
        for cart in carts { #expect(playground.records("\(cart)outbox.jsonl").map { $0["seq"] as? Int } == [4], "\(cart)") }
    }
}

import Foundation
import Testing

/// `basket-sync watch` with real files and real inotify, the binary run as a user runs it.
@Suite(.serialized) struct WatchTests {
    /// A sync directory with a running agent; A and B made Mealz-related by a first push.
    func started(_ playground: Playground, arguments: [String] = [], config: String? = nil) async throws -> AgentProcess {
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        if let config { try playground.write("basket-sync.json", config) }
        let agent = try AgentProcess(directory: playground.path, arguments: arguments)
        try await agent.waitUntilWatching()
        return agent
    }

    /// Mealz pushes A+1, the host applies it once it is in the outbox (a host acknowledges only
    /// what it has seen): A is a Mealz-related line, notified.
    func mealzLineNotified(_ playground: Playground, cart: String = "cart.json") async throws {
        let before = playground.records("outbox.jsonl").count
        _ = try basketSync(["-C", playground.path, "push", "A=+1"])
        try await eventually("the delta is in the outbox") { playground.records("outbox.jsonl").count > before }
        try playground.writeAtomically(cart, cartJSON([("A", 1)], syncedThrough: 1))
        try await eventually("the cart is notified") { lastNotification(playground) == ["A": 1] }
    }

    func lastNotification(_ playground: Playground) -> [String: Int]? {
        playground.records("notifications.jsonl").last.map(products)
    }

    /// The database unlinked under a running agent stops it (74) before it acknowledges anything
    /// more.
    @Test func aDatabaseDeletedUnderTheAgentStopsItBeforeAnyAcknowledgement() async throws {
        let playground = try Playground()
        let agent = try await started(playground)
        try await mealzLineNotified(playground)
        try FileManager.default.removeItem(atPath: playground.path + "/.basket-sync/state.db")
        _ = try basketSync(["-C", playground.path, "push", "--id", "after", "A=+1"])
        try await eventually("the agent stops") { !agent.process.isRunning }
        #expect(agent.process.terminationStatus == 74)
        #expect(agent.log.contains("state.db: deleted or replaced while basket-sync had the database open"))
        #expect(playground.names("inbox/new").count == 1, "the event is not acknowledged")
        #expect(playground.records("outbox.jsonl").count == 1)
    }

    /// A cart that appears as something no writer closes — a hard link, a symbolic link, a FIFO,
    /// a folder — is read at once and refused as what it is (the agent says why, `status` shows
    /// it), as a one-shot `sync` refuses it; then a cart written as usual is taken again.
    @Test(arguments: ["hard link", "symbolic link", "FIFO", "folder"])
    func aCartThatAppearsAsALinkIsRefusedAtOnce(shape: String) async throws {
        let playground = try Playground()
        let agent = try await started(playground)
        try await mealzLineNotified(playground)
        let cart = playground.path + "/cart.json"
        let elsewhere = playground.path + "/../elsewhere-\(UUID().uuidString).json"
        try Data(cartJSON([("A", 3)], syncedThrough: 1).utf8).write(to: URL(fileURLWithPath: elsewhere))
        defer { try? FileManager.default.removeItem(atPath: elsewhere) }
        try FileManager.default.removeItem(atPath: cart)
        switch shape {
        case "hard link": #expect(link(elsewhere, cart) == 0)
        case "symbolic link": try FileManager.default.createSymbolicLink(atPath: cart, withDestinationPath: elsewhere)
        case "FIFO": #expect(mkfifo(cart, 0o644) == 0)
        default: try FileManager.default.createDirectory(atPath: cart, withIntermediateDirectories: false)
        }
        try await eventually("the agent says the cart is refused") { agent.log.contains("cart rejected: ") }
        #expect(lastNotification(playground) == ["A": 1], "nothing taken from the \(shape)")
        let status = try basketSync(["-C", playground.path, "status"])
        #expect(status.stdout.contains("rejected"), "\(status.stdout)")
        try? FileManager.default.removeItem(atPath: cart)
        try playground.writeAtomically("cart.json", cartJSON([("A", 2)], syncedThrough: 1))
        try await eventually("a cart written as usual is taken") { lastNotification(playground) == ["A": 2] }
        #expect(agent.stop() == 0)
    }

    /// Watches refused for want of them (other programs of this user hold the rest: the shim's
    /// FAULTSHIM_WATCHES) at any point of the directory's five leave it polled, not half watched
    /// and not stopped: events, cart versions and other processes' commits are all seen; the
    /// log names the sysctl, not a full disk.
    @Test(arguments: [0, 1, 2, 3, 4])
    func watchesRefusedAtAnyPointLeaveTheDirectoryPolled(watches: Int) async throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        try playground.write("basket-sync.json", #"{"watch": {"mode": "auto", "pollIntervalMs": 50}}"#)
        let agent = try AgentProcess(directory: playground.path, environment: [
            "LD_PRELOAD": FaultTests.shim, "FAULTSHIM_WATCHES": String(watches), "BASKET_SYNC_WATCH_MODE": "",
        ])
        try await agent.waitUntilWatching()
        #expect(agent.log.contains("the inotify watch limit is reached") && agent.log.contains("polled every 50 ms"), "watches \(watches): \(agent.log)")
        #expect(!agent.log.contains("disk space"), "watches \(watches): \(agent.log)")
        #expect(try basketSync(["-C", playground.path, "push", "A=+1"]).status == 0)
        try await eventually("watches \(watches): the event reaches the outbox") { playground.records("outbox.jsonl").count == 1 }
        try playground.writeAtomically("cart.json", cartJSON([("A", 1)], syncedThrough: 1))
        try await eventually("watches \(watches): the cart is notified") { playground.records("notifications.jsonl").count == 1 }
        #expect(agent.stop() == 0)
    }

    /// The host writes its cart again, the same bytes: a version of its own, taken as a one-shot
    /// `sync` takes it — a line made Mealz's since (a push) is notified at its quantity in the
    /// cart, the same line as `sync` writes beside the agent.
    @Test func theSameCartWrittenAgainIsTakenAsANewVersion() async throws {
        let playground = try Playground()
        let agent = try await started(playground)
        let cart = cartJSON([("keep", 1), ("X", 1)], syncedThrough: 0)
        try playground.writeAtomically("cart.json", cart)
        try await eventually("the first cart is notified (no Mealz line yet)") { playground.records("notifications.jsonl").count == 1 }
        #expect(lastNotification(playground) == [:])
        _ = try basketSync(["-C", playground.path, "push", "--id", "e1", "X=+1"])
        try await eventually("the delta is in the outbox") { playground.records("outbox.jsonl").count == 1 }
        try playground.writeAtomically("cart.json", cart)
        try await eventually("the cart written again is notified with X") { lastNotification(playground) == ["X": 1] }
        #expect(agent.stop() == 0)
    }

    /// The agent's own appends do not wake it: it keeps its JSON Lines files open, so no
    /// close-after-write of theirs reaches the directory it watches. A watch of the test's own sees
    /// every close-after-write in the sync directory while events and carts go through.
    @Test func theAgentsOwnWritesDoNotWakeIt() async throws {
        let playground = try Playground()
        let agent = try await started(playground)
        let watch = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
        #expect(watch >= 0)
        defer { close(watch) }
        #expect(inotify_add_watch(watch, playground.path, UInt32(IN_CLOSE_WRITE)) >= 0)
        for round in 1...3 {
            try playground.write("inbox/tmp/e\(round)", #"{"id":"e\#(round)","type":"basketDelta","products":[{"id":"A","quantity":1}]}"#)
            try FileManager.default.moveItem(atPath: playground.path + "/inbox/tmp/e\(round)", toPath: playground.path + "/inbox/new/e\(round)")
            try await eventually("event \(round) reaches the outbox") { playground.records("outbox.jsonl").count == round }
            try playground.writeAtomically("cart.json", cartJSON([("A", round)], syncedThrough: round))
            try await eventually("cart \(round) is notified") { playground.records("notifications.jsonl").count == round }
        }
        // Every append but the last is followed by another step, so its close (if any) was done.
        var closed: [String] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(watch, $0.baseAddress, $0.count) }
            guard count > 0 else { break }
            var offset = 0
            while offset < count {
                let (length, name) = buffer.withUnsafeBytes { raw -> (Int, String) in
                    let length = Int(raw.load(fromByteOffset: offset + 12, as: UInt32.self))
                    let bytes = raw[(offset + 16)..<(offset + 16 + length)].prefix { $0 != 0 }
                    return (length, String(decoding: bytes, as: UTF8.self))
                }
                closed.append(name)
                offset += 16 + length
            }
        }
        #expect(!closed.contains { $0.hasSuffix(".jsonl") }, "the agent closed a file it wrote in the directory it watches: \(closed)")
        #expect(agent.process.isRunning)
    }

    /// Two deliveries whose names are canonically equivalent (`café` in NFC and in NFD) are two
    /// events: the agent takes both as they arrive.
    @Test func deliveriesNamedAlikeUnderUnicodeAreTwoEvents() async throws {
        let playground = try Playground()
        let agent = try await started(playground)
        for (name, sku) in [("caf\u{E9}", "A"), ("cafe\u{301}", "B")] {
            try playground.write("inbox/tmp/" + name, #"{"id":"e-\#(sku)","type":"basketDelta","products":[{"id":"\#(sku)","quantity":1}]}"#)
        }
        for name in ["caf\u{E9}", "cafe\u{301}"] {
            try FileManager.default.moveItem(atPath: playground.path + "/inbox/tmp/" + name, toPath: playground.path + "/inbox/new/" + name)
        }
        try await eventually("both events reach the outbox") { playground.records("outbox.jsonl").count == 2 }
        // An event is moved to cur/ once its record is durable: just after.
        try await eventually("both events are in cur/") { playground.names("inbox/cur").count == 2 }
        #expect(agent.process.isRunning)
    }

    /// Under a running agent: its WAL (or shared memory) deleted, it stops (74) before it
    /// acknowledges anything more — the commits would go to an unlinked file. After the kill,
    /// the commands that write find the database behind the files (74) before writing.
    @Test(arguments: ["state.db-wal", "state.db-shm"])
    func aWALDeletedUnderTheAgentStopsItBeforeAnyAcknowledgement(file: String) async throws {
        let playground = try Playground()
        let agent = try await started(playground)
        try await mealzLineNotified(playground)
        try FileManager.default.removeItem(atPath: playground.path + "/.basket-sync/" + file)
        _ = try basketSync(["-C", playground.path, "push", "--id", "after", "A=+1"])
        try await eventually("the agent stops") { !agent.process.isRunning }
        #expect(agent.process.terminationStatus == 74)
        #expect(agent.log.contains("\(file): deleted or replaced while basket-sync had the database open"), "\(agent.log)")
        #expect(playground.names("inbox/new").count == 1, "the event is not acknowledged")
        #expect(playground.records("outbox.jsonl").count == 1)
    }

    /// A SIGHUP that changes `"cart"` makes the agent watch the new path at once.
    @Test func aSighupThatMovesTheCartWatchesTheNewPath() async throws {
        let playground = try Playground()
        let agent = try await started(playground)
        try await mealzLineNotified(playground)
        try playground.write("basket-sync.json", #"{"cart": "host/cart.json"}"#)
        kill(agent.process.processIdentifier, SIGHUP)
        try await eventually("the new cart path is followed") { agent.log.contains("the cart is now host/cart.json") }
        try FileManager.default.createDirectory(atPath: playground.path + "/host", withIntermediateDirectories: false)
        try playground.writeAtomically("host/cart.json", cartJSON([("A", 3)], syncedThrough: 1))
        try await eventually("the cart at the new path is notified") { lastNotification(playground) == ["A": 3] }
        // A broken configuration keeps the settings in force, and says so.
        try playground.write("basket-sync.json", "{")
        kill(agent.process.processIdentifier, SIGHUP)
        try await eventually("the agent says it keeps its settings") { agent.log.contains("the settings in force are kept") }
        try playground.writeAtomically("host/cart.json", cartJSON([("A", 2)], syncedThrough: 1))
        try await eventually("the cart is still taken") { lastNotification(playground) == ["A": 2] }
        #expect(agent.stop() == 0)
    }

    /// A cart taken is judged again under stricter settings (a limit on its size or its
    /// quantities lowered, its list under another key; a SIGHUP or a one-shot command) and
    /// rejected; once the settings are back it is read again and taken: its rejection no longer
    /// stands, though the file never changed.
    @Test(arguments: [true, false], [#"{"limits": {"maxFileBytes": 10}}"#, #"{"keys": {"products": "items"}}"#])
    func aCartRejectedUnderOtherSettingsIsTakenWhenTheyAreBack(underTheAgent: Bool, stricter: String) async throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        #expect(try basketSync(["-C", playground.path, "push", "A=+1"]).status == 0)
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        #expect(playground.records("outbox.jsonl").count == 1)
        try playground.writeAtomically("cart.json", cartJSON([("A", 1)], syncedThrough: 1))
        // Taken once it is older than the margin of a version known without reading it.
        usleep(1_200_000)
        let agent = underTheAgent ? try AgentProcess(directory: playground.path) : nil
        if let agent { try await agent.waitUntilWatching() } else { #expect(try basketSync(["-C", playground.path, "sync"]).status == 0) }
        try await eventually("the cart is notified") { lastNotification(playground) == ["A": 1] }
        #expect(try basketSync(["-C", playground.path, "status"]).stdout.contains("last error: none"), "no error before the settings change")
        func settle(_ settings: String, until said: String) async throws {
            try playground.write("basket-sync.json", settings)
            if let agent {
                kill(agent.process.processIdentifier, SIGHUP)
            } else {
                _ = try basketSync(["-C", playground.path, "sync"])
            }
            try await eventually("status: \(said)") { try basketSync(["-C", playground.path, "status"]).stdout.contains(said) }
        }
        try await settle(stricter, until: "still current: no valid cart read since")
        try await settle("{}", until: "a valid cart was read since")
        let status = try basketSync(["-C", playground.path, "status", "--json"]).stdout
        #expect(status.contains("\"read\":\"unchanged\""), "\(status)")
        if let agent { #expect(agent.stop() == 0) }
    }

    @Test func atomicRenameInPlaceRewriteAndTruncateThenWriteAreTaken() async throws {
        let playground = try Playground()
        let agent = try await started(playground)
        #expect(try basketSync(["-C", playground.path, "push", "A=+2", "B=+1"]).status == 0)
        try await eventually("the delta is in the outbox") { playground.records("outbox.jsonl").count == 1 }

        // A careful host: temp file + rename (Foundation's .atomic).
        try playground.writeAtomically("cart.json", cartJSON([("A", 2), ("B", 1), ("X", 4)], syncedThrough: 1))
        try await eventually("the renamed cart is notified") { lastNotification(playground) == ["A": 2, "B": 1] }

        // In place: open with O_TRUNC, write, close.
        try playground.write("cart.json", cartJSON([("A", 1), ("B", 1), ("X", 4)], syncedThrough: 1))
        try await eventually("the rewritten cart is notified") { lastNotification(playground) == ["A": 1, "B": 1] }

        // Truncate, close, then write again: the full one taken.
        let handle = try FileHandle(forWritingTo: playground.url("cart.json"))
        try handle.truncate(atOffset: 0)
        try handle.close()
        try playground.write("cart.json", cartJSON([("B", 1), ("X", 4)], syncedThrough: 1))
        try await eventually("the truncated-then-written cart is notified") { lastNotification(playground) == ["B": 1] }
        #expect(agent.stop() == 0)
    }

    /// A host writing in place may be read between its truncate and its write: a version that
    /// does not parse is rejected only once it has stayed as it is for half a second. Read
    /// empty, then written within that time: taken, no rejection said or counted. Left empty
    /// (or torn), it is rejected as before.
    @Test func aVersionReadBetweenATruncateAndItsWriteIsNotRejected() async throws {
        let playground = try Playground()
        let agent = try await started(playground)
        #expect(try basketSync(["-C", playground.path, "push", "A=+1"]).status == 0)
        try await eventually("the delta is in the outbox") { playground.records("outbox.jsonl").count == 1 }
        try playground.write("cart.json", cartJSON([("X", 1), ("A", 1)], syncedThrough: 1))
        try await eventually("the first version is taken") { lastNotification(playground) == ["A": 1] }
        var shown = false
        // A loaded machine may take longer than the half second between the two writes; that
        // attempt proves nothing either way, and the next starts over.
        for attempt in 1...5 {
            let handle = try FileHandle(forWritingTo: playground.url("cart.json"))
            try handle.truncate(atOffset: 0)
            try handle.close()
            let truncated = ProcessInfo.processInfo.systemUptime
            usleep(150_000)  // time for the agent to read the empty version
            try playground.write("cart.json", cartJSON([("X", 1), ("A", attempt + 1)], syncedThrough: 1))
            let late = ProcessInfo.processInfo.systemUptime - truncated
            try await eventually("the written version is taken") { lastNotification(playground) == ["A": attempt + 1] }
            guard late < 0.4 else {
                print("attempt \(attempt): written \(late) s after the truncate; starting over")
                continue
            }
            shown = true
            break
        }
        #expect(shown, "the write never came within the settle time")
        #expect(!agent.log.contains("cart rejected"), "\(agent.log)")
        let status = try basketSync(["-C", playground.path, "status", "--json"])
        #expect(!status.stdout.contains("the file is empty"), "no error left in status: \(status.stdout)")
        // Left torn: rejected once it has stayed so.
        try playground.write("cart.json", "{\"products\": [")
        try await eventually("a torn cart left as it is is rejected") { agent.log.contains("cart rejected: ") && agent.log.contains("cart.json:1:") }
        #expect(agent.stop() == 0)
    }

    @Test func aBurstOfRewritesEndsWithTheLastVersionNotified() async throws {
        let playground = try Playground()
        let agent = try await started(playground)
        _ = try basketSync(["-C", playground.path, "push", "A=+1"])
        try await eventually("the delta is in the outbox") { playground.records("outbox.jsonl").count == 1 }
        for quantity in 1...300 {
            if quantity % 2 == 0 {
                try playground.writeAtomically("cart.json", cartJSON([("A", quantity), ("X", 1)], syncedThrough: 1))
            } else {
                try playground.write("cart.json", cartJSON([("A", quantity), ("X", 1)], syncedThrough: 1))
            }
        }
        try await eventually("the last version is notified") { lastNotification(playground) == ["A": 300] }
        let seqs = playground.records("notifications.jsonl").map { $0["seq"] as! Int }
        #expect(seqs == Array(1...seqs.count), "notification seqs are contiguous")
        #expect(agent.stop() == 0)
    }

    @Test func aDeletedCartWaitsAndItsReturnIsTaken() async throws {
        let playground = try Playground()
        let agent = try await started(playground)
        try await mealzLineNotified(playground)
        let before = playground.records("notifications.jsonl").count

        try FileManager.default.removeItem(at: playground.url("cart.json"))
        _ = try basketSync(["-C", playground.path, "push", "B=+1"])
        try await eventually("the next delta is in the outbox") { playground.records("outbox.jsonl").count == 2 }
        #expect(playground.records("notifications.jsonl").count == before, "a missing cart is not an empty cart")

        try playground.writeAtomically("cart.json", cartJSON([("A", 1), ("B", 1)], syncedThrough: 2))
        try await eventually("the re-created cart is notified") { lastNotification(playground) == ["A": 1, "B": 1] }
        #expect(agent.stop() == 0)
    }

    @Test func theCartsDirectoryDeletedAndRecreatedIsWatchedAgain() async throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        try FileManager.default.createDirectory(at: playground.url("host"), withIntermediateDirectories: true)
        let agent = try await started(playground, config: "{ \"cart\": \"host/cart.json\" }")
        try await mealzLineNotified(playground, cart: "host/cart.json")

        for round in 2...4 {
            try FileManager.default.removeItem(at: playground.url("host"))
            try FileManager.default.createDirectory(at: playground.url("host"), withIntermediateDirectories: true)
            try playground.writeAtomically("host/cart.json", cartJSON([("A", round)], syncedThrough: 1))
            try await eventually("the cart in the new directory is notified (round \(round))") { lastNotification(playground) == ["A": round] }
        }
        // Replaced by a rename of a whole new directory, as a deployment does.
        try FileManager.default.createDirectory(at: playground.url("host.new"), withIntermediateDirectories: true)
        try playground.write("host.new/cart.json", cartJSON([("A", 9)], syncedThrough: 1))
        try FileManager.default.removeItem(at: playground.url("host"))
        try FileManager.default.moveItem(at: playground.url("host.new"), to: playground.url("host"))
        try await eventually("the cart of the renamed directory is notified") { lastNotification(playground) == ["A": 9] }
        #expect(agent.stop() == 0)
    }

    @Test func aMalformedCartIsRejectedWholeAndTheFixedOneTaken() async throws {
        let playground = try Playground()
        let agent = try await started(playground)
        try await mealzLineNotified(playground)
        let before = playground.records("notifications.jsonl").count

        try playground.writeAtomically("cart.json", "{\"products\": [\n  {\"id\": \"A\", \"quantity\": -3}\n], \"syncedThrough\": 1}\n")
        try await eventually("the error is logged") { agent.log.contains("cart.json:2:27: ") }
        #expect(agent.log.contains("cart.json:2:27: \"quantity\" is -3; an absolute quantity must be 0 or more"))
        let status = try basketSync(["-C", playground.path, "status", "--json"])
        #expect(status.stdout.contains("cart.json:2:27"), "status shows the last error")
        #expect(playground.records("notifications.jsonl").count == before, "nothing is sent for a bad cart")

        try playground.writeAtomically("cart.json", "{\"products\": [{\"id\": \"A\", \"quantity\": 2}, ], \"syncedThrough\": 1}")
        try await eventually("the second error is logged") { agent.log.contains("cart.json:1:43: unexpected ']'") }

        try playground.writeAtomically("cart.json", cartJSON([("A", 3)], syncedThrough: 1))
        try await eventually("the fixed cart is notified") { lastNotification(playground) == ["A": 3] }
        #expect(agent.stop() == 0)
    }

    @Test func aChangeToNonMealzLinesOnlyIsNotNotified() async throws {
        let playground = try Playground()
        let agent = try await started(playground)
        _ = try basketSync(["-C", playground.path, "push", "A=+1"])
        try await eventually("the delta is in the outbox") { playground.records("outbox.jsonl").count == 1 }
        try playground.writeAtomically("cart.json", cartJSON([("A", 1), ("X", 1)], syncedThrough: 1))
        try await eventually("the cart is notified") { lastNotification(playground) == ["A": 1] }
        let before = playground.records("notifications.jsonl").count
        try playground.writeAtomically("cart.json", cartJSON([("A", 1), ("X", 5), ("Y", 2)], syncedThrough: 1))
        // A marker change after it: once the marker is notified, the X/Y change was seen and skipped.
        try playground.writeAtomically("cart.json", cartJSON([("A", 2), ("X", 5), ("Y", 2)], syncedThrough: 1))
        try await eventually("the marker is notified") { lastNotification(playground) == ["A": 2] }
        #expect(playground.records("notifications.jsonl").count == before + 1)
        #expect(agent.stop() == 0)
    }

    @Test func aDuplicatedInboxIdIsProcessedOnceAndAMalformedEventIsSetAside() async throws {
        let playground = try Playground()
        let agent = try await started(playground)
        #expect(try basketSync(["-C", playground.path, "push", "--id", "evt-1", "A=+1"]).status == 0)
        try playground.write("inbox/tmp/bad-1", "{\"id\": \"evt-2\", \"type\": \"basketDelta\", \"products\": [{\"id\": \"A\", \"quantity\": 1.5}]}")
        try FileManager.default.moveItem(at: playground.url("inbox/tmp/bad-1"), to: playground.url("inbox/new/bad-1"))
        #expect(try basketSync(["-C", playground.path, "push", "--id", "evt-1", "A=+1"]).status == 0)
        #expect(try basketSync(["-C", playground.path, "push", "--id", "evt-3", "B=+1"]).status == 0)
        try await eventually("every event is taken") { playground.names("inbox/new").isEmpty && playground.names("inbox/cur").count == 3 }
        try await eventually("evt-3 is in the outbox") { playground.records("outbox.jsonl").count == 2 }
        let outbox = playground.records("outbox.jsonl")
        #expect(outbox.map { $0["source"] as? String } == ["evt-1", "evt-3"])
        #expect(playground.names("inbox/bad") == ["bad-1", "bad-1.error"])
        #expect(playground.read("inbox/bad/bad-1.error").contains("bad-1:1:77: \"quantity\" 1.5 must be a whole number written in digits alone (no fraction, no exponent: 100, not 1e2 or 100.0)"))
        #expect(agent.stop() == 0)
    }

    @Test func pushAndSyncBesideARunningWatchLoseAndDoubleNothing() async throws {
        let playground = try Playground()
        let agent = try await started(playground)
        for index in 0..<40 {
            #expect(try basketSync(["-C", playground.path, "push", "--id", "e\(index)", "S\(index % 5)=+1"]).status == 0)
            if index % 4 == 0 {
                try playground.writeAtomically("cart.json", cartJSON([("S0", index)], syncedThrough: 0))
                let sync = try basketSync(["-C", playground.path, "sync"])
                #expect(sync.status == 0, "sync: \(sync.stderr)")
            }
        }
        try await eventually("every event is taken") { playground.names("inbox/cur").count == 40 }
        _ = try basketSync(["-C", playground.path, "sync"])
        let outbox = playground.records("outbox.jsonl")
        #expect(outbox.map { $0["seq"] as! Int } == Array(1...40))
        #expect(Set(outbox.map { $0["source"] as! String }) == Set((0..<40).map { "e\($0)" }))
        let seqs = playground.records("notifications.jsonl").map { $0["seq"] as! Int }
        #expect(seqs == Array(1...seqs.count))
        #expect(agent.stop() == 0)
    }

    @Test func aSecondAgentIsBusyAndNamesTheFirst() async throws {
        let playground = try Playground()
        let agent = try await started(playground)
        let second = try basketSync(["-C", playground.path, "watch"])
        #expect(second.status == 75)
        #expect(second.stderr.contains("pid \(agent.process.processIdentifier)"))
        #expect(agent.stop(SIGINT) == 0)
    }

    @Test func withoutASynchronizerDeltasAreIgnoredAndCounted() async throws {
        let playground = try Playground()
        let agent = try await started(playground, arguments: ["--no-synchronizer"])
        _ = try basketSync(["-C", playground.path, "push", "A=+1"])
        try await eventually("the event is taken") { playground.names("inbox/cur").count == 1 }
        #expect(playground.records("outbox.jsonl").isEmpty)
        let status = try basketSync(["-C", playground.path, "status", "--json"])
        let json = try JSONSerialization.jsonObject(with: Data(status.stdout.utf8)) as! [String: Any]
        #expect((json["counters"] as! [String: Any])["ignored"] as? Int == 1)
        try await eventually("the ignored deltas are said") { agent.log.contains("no synchronizer registered: ignored deltas") }
        #expect(agent.stop() == 0)
    }

    @Test func aPendingWindowExpiresWithoutAnyOtherEvent() async throws {
        let playground = try Playground()
        let agent = try await started(playground, config: "{ \"pendingTimeoutSeconds\": 0.3 }")
        _ = try basketSync(["-C", playground.path, "push", "A=+1"])
        try await eventually("the window's timer rolls the batch back") { agent.log.contains("batch #1 rolled back") }
        let status = try basketSync(["-C", playground.path, "status", "--json"])
        let json = try JSONSerialization.jsonObject(with: Data(status.stdout.utf8)) as! [String: Any]
        #expect((json["counters"] as! [String: Any])["rolledBack"] as? Int == 1)
        #expect((json["pending"] as! [Any]).isEmpty)
        #expect(agent.stop() == 0)
    }

    /// A window opened while the agent's engine (and its copy of the state) is kept still closes
    /// on time after the agent is killed: a start does not step a cart certainly as last read
    /// (read well after its last change) but reads its deadline kept beside the state, which
    /// must follow every change a kept engine makes — here a window closed by the host's echo
    /// (a host without `syncedThrough`), then another opened.
    @Test func aWindowOpenedUnderAKeptEngineClosesAfterTheAgentIsKilled() async throws {
        let playground = try Playground()
        let first = try await started(playground, config: "{ \"pendingTimeoutSeconds\": 3 }")
        _ = try basketSync(["-C", playground.path, "push", "A=+1"])
        try await eventually("the first delta is in the outbox") { playground.records("outbox.jsonl").count == 1 }
        try playground.writeAtomically("cart.json", cartJSON([("A", 1)]))
        try await eventually("the echo is notified") { lastNotification(playground) == ["A": 1] }
        kill(first.process.processIdentifier, SIGKILL)
        first.process.waitUntilExit()
        // Read again by the next start well after its last change: certainly that version from then on.
        try await eventually("the cart's last change is over a second and a half old") {
            var info = stat()
            guard stat(playground.url("cart.json").path, &info) == 0 else { return false }
            var now = timespec()
            clock_gettime(CLOCK_REALTIME, &now)
            return (now.tv_sec - info.st_ctim.tv_sec) * 1_000_000_000 + (now.tv_nsec - info.st_ctim.tv_nsec) > 1_500_000_000
        }
        let second = try AgentProcess(directory: playground.path)
        try await second.waitUntilWatching()
        _ = try basketSync(["-C", playground.path, "push", "A=+1"])
        try await eventually("the second delta is in the outbox") { playground.records("outbox.jsonl").count == 2 }
        kill(second.process.processIdentifier, SIGKILL)
        second.process.waitUntilExit()
        let third = try AgentProcess(directory: playground.path)
        try await third.waitUntilWatching()
        try await eventually("the window closes after the restart", timeout: 60) { third.log.contains("batch #2 rolled back") }
        #expect(third.stop() == 0)
    }

    /// inotify's own failure: an agent that polls (the suite run again with BASKET_SYNC_WATCH_MODE=poll) has no queue to overflow.
    @Test(.enabled(if: !agentsPoll, "the agents poll: no inotify queue")) func afterAnOverflowOfTheInotifyQueueEverythingIsReadAgain() async throws {
        let playground = try Playground()
        let agent = try await started(playground)
        // "watching" is said before the start pass: stopped inside it, between its inbox and its
        // cart, the agent would read the cart below before its event and rightly refuse the cart's
        // claim to acknowledge a record not yet made (docs/spec.md §4 rule 4). A first round trip
        // done, the agent waits for inotify.
        try await mealzLineNotified(playground)
        let limit = Int((try? String(contentsOfFile: "/proc/sys/fs/inotify/max_queued_events", encoding: .utf8))?
            .trimmingCharacters(in: .whitespacesAndNewlines) ?? "") ?? 16_384
        // Stopped, the agent reads nothing: more distinct events than the queue holds overflow it,
        // and the cart and inbox events that come after them are lost from the queue.
        kill(agent.process.processIdentifier, SIGSTOP)
        for index in 0...(limit + 100) {
            _ = FileManager.default.createFile(atPath: playground.url("junk-\(index)").path, contents: nil)
        }
        #expect(try basketSync(["-C", playground.path, "push", "--id", "after-overflow", "A=+1"]).status == 0)
        // Written while the agent is stopped, before #2 exists: it claims what the host has seen.
        try playground.writeAtomically("cart.json", cartJSON([("A", 2)], syncedThrough: 1))
        kill(agent.process.processIdentifier, SIGCONT)
        // Generous deadlines: 16,000 files and a full re-read, on a machine that may run two suites.
        try await eventually("the agent notices the overflow", timeout: 90) { agent.log.contains("the inotify queue overflowed") }
        try await eventually("the event after the overflow is taken", timeout: 90) { playground.records("outbox.jsonl").count == 2 }
        try await eventually("the cart after the overflow is notified", timeout: 90) { lastNotification(playground) == ["A": 2] }
        #expect(!agent.log.contains("the cart says syncedThrough"), "\(agent.log)")
        #expect(agent.stop() == 0)
    }

    /// A command beside a busy agent that reads the database, then finds in a file a record the
    /// agent committed and appended meanwhile, never calls the database lost (74). Pushes from one
    /// process, syncs and applies from another, the agent busy.
    @Test func commandsBesideABusyAgentNeverCallTheDatabaseBehind() async throws {
        let playground = try Playground()
        let agent = try await started(playground)
        try playground.write("cart.json", cartJSON([], syncedThrough: 0))
        let pusher = try Child.run(URL(fileURLWithPath: "/bin/sh"), arguments: [
            "-c", "for i in $(seq 300); do \"$0\" -C \"$1\" push A=+1 >/dev/null || exit 1; done", binary.path, playground.path])
        var runs = 0
        var failures: [String] = []
        while pusher.isRunning || runs < 20 {
            let command = runs % 3 == 2 ? "apply" : "sync"
            let run = try basketSync(["-C", playground.path, command])
            if run.status != 0 && run.status != 65 { failures.append("\(command) \(run.status): \(run.stderr)") }
            runs += 1
        }
        pusher.waitUntilExit()
        #expect(pusher.terminationStatus == 0)
        #expect(failures.isEmpty, "\(failures.count) of \(runs) commands failed: \(failures.prefix(3))")
        try await eventually("every event reaches the outbox") { playground.records("outbox.jsonl").count == 300 }
        // Nothing was delivered twice: the agent and a sync taking the same file are no redelivery.
        let status = try JSONSerialization.jsonObject(with: Data(try basketSync(["-C", playground.path, "status", "--json"]).stdout.utf8)) as! [String: Any]
        #expect((status["inbox"] as? [String: Any])?["duplicates"] as? Int == 0, "\(String(describing: status["inbox"]))")
        #expect(agent.stop() == 0)
    }

    /// A log a person can follow: one line per record the agent makes; --quiet keeps
    /// warnings and errors; the JSON format carries the record.
    @Test func theLogSaysWhatTheAgentDid() async throws {
        let playground = try Playground()
        let agent = try await started(playground)
        _ = try basketSync(["-C", playground.path, "push", "--id", "evt-42", "A=+2", "B=-1"])
        try await eventually("the event is in the log") { agent.log.contains("basket-sync: outbox #1 updateBasket A +2, B -1 from evt-42\n") }
        try playground.writeAtomically("cart.json", cartJSON([("A", 2)], syncedThrough: 1))
        try await eventually("the notification is in the log") { agent.log.contains("basket-sync: notify #1 A=2 st 1\n") }
        try playground.writeAtomically("cart.json", "{\"products\": 3}")
        try await eventually("the rejection is in the log") { agent.log.contains("basket-sync: error: cart rejected: \(playground.path)/cart.json:1:14:") }
        #expect(agent.stop() == 0)

        let quietPlace = try Playground()
        let quiet = try await started(quietPlace, arguments: ["--quiet"])
        _ = try basketSync(["-C", quietPlace.path, "push", "A=+1"])
        try await eventually("the event is taken") { quietPlace.records("outbox.jsonl").count == 1 }
        try quietPlace.writeAtomically("cart.json", "{\"products\": 3}")
        try await eventually("the rejection is in the log") { quiet.log.contains("cart rejected:") }
        #expect(!quiet.log.contains("outbox #1"), "--quiet: no info lines: \(quiet.log)")
        #expect(quiet.log.contains("watching "), "the line that says it is ready stays")
        #expect(quiet.stop() == 0)

        let jsonPlace = try Playground()
        let json = try await started(jsonPlace, arguments: ["--log-format", "json"])
        _ = try basketSync(["-C", jsonPlace.path, "push", "--id", "e-1", "A=+1"])
        try await eventually("the event is in the log") { json.log.contains("outbox #1") }
        let line = try #require(json.log.split(separator: "\n").first { $0.contains("outbox #1") })
        let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as! [String: Any]
        let record = try #require(object["record"] as? [String: Any])
        #expect(record["seq"] as? Int == 1 && record["source"] as? String == "e-1" && record["type"] as? String == "updateBasket")
        #expect(json.stop() == 0)
    }

    @Test(arguments: ["move", "rm -rf"])
    func theSyncDirectoryGoneStopsTheAgentWithAClearError(how: String) async throws {
        let playground = try Playground()
        let directory = playground.path + "/sync"
        #expect(try basketSync(["-C", directory, "init"]).status == 0)
        let agent = try AgentProcess(directory: directory)
        try await agent.waitUntilWatching()
        if how == "move" {
            try FileManager.default.moveItem(atPath: directory, toPath: playground.path + "/moved-away")
        } else {
            let remove = try Child.run(URL(fileURLWithPath: "/bin/rm"), arguments: ["-rf", directory])
            remove.waitUntilExit()
        }
        agent.process.waitUntilExit()
        #expect(agent.process.terminationStatus == 66)
        #expect(agent.log.contains("the sync directory or its .basket-sync/ was removed or moved away"))
    }
}

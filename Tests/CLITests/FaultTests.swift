import Foundation
import Testing

/// Faults a kill -9 does not show: the order of durable steps (what a power loss would keep),
/// a failing fsync, a full disk, a read-only file system, missing permissions.
@Suite(.serialized) struct FaultTests {
    /// The LD_PRELOAD seam of Tests/Support/faultshim.c, built once with the system's cc.
    static let shim: String = {
        let source = SampleTests.root.appendingPathComponent("Tests/Support/faultshim.c").path
        let output = FileManager.default.temporaryDirectory.appendingPathComponent("basket-sync-faultshim-\(getpid()).so").path
        let cc = Child()
        cc.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        cc.arguments = ["cc", "-shared", "-fPIC", "-O1", "-o", output, source, "-ldl"]
        try? cc.run()
        cc.waitUntilExit()
        return output
    }()

    struct Step: Equatable {
        var call: String
        var path: String
        var detail: String
    }

    func steps(_ log: String) -> [Step] {
        log.split(separator: "\n").map { line in
            let parts = line.split(separator: " ", maxSplits: 2).map(String.init)
            return Step(call: parts[0], path: parts[1], detail: parts.count > 2 ? parts[2] : "")
        }
    }

    @Test func everyAcknowledgementFollowsTheDurableRecordsItDependsOn() throws {
        let playground = try Playground()
        _ = try basketSync(["-C", playground.path, "init"])
        for index in 0..<5 { _ = try basketSync(["-C", playground.path, "push", "--id", "e\(index)", "A=+1"]) }
        try playground.write("cart.json", cartJSON([("A", 1)], syncedThrough: 0))
        let log = playground.path + "/shim.log"
        let run = try basketSync(["-C", playground.path, "sync"], environment: ["LD_PRELOAD": Self.shim, "FAULTSHIM_LOG": log])
        #expect(run.status == 0, "\(run.stderr)")
        let order = steps(playground.read("shim.log"))
        #expect(order.count > 10, "the seam saw the calls: \(order.count)")

        // One fsync per change (docs/spec.md §6): each event is durable with the database commit
        // (WAL fdatasync), its line written after it; the event is filed after both. The five
        // events are one group: one commit, one append, then five renames; no fsync of the
        // outbox stands between the commit and the filing.
        let acknowledgements = order.indices.filter { order[$0].call == "rename" && order[$0].detail.contains("/inbox/cur/") }
        #expect(acknowledgements.count == 5)
        for ack in acknowledgements {
            let before = order[..<ack]
            let commit = before.lastIndex { $0.call == "fdatasync" && $0.path.hasSuffix("state.db-wal") }
            let write = before.lastIndex { $0.call == "write" && $0.path.hasSuffix("outbox.jsonl") }
            #expect(commit != nil && write != nil, "an acknowledgement without its durable steps: \(Array(before))")
            if let commit, let write { #expect(commit < write) }
            #expect(!before.contains { $0.call == "fsync" && $0.path.hasSuffix("outbox.jsonl") }, "the line's fsync waits for the flush")
        }
        if let first = acknowledgements.first, let last = acknowledgements.last {
            let outboxWrites = order[..<first].filter { $0.call == "write" && $0.path.hasSuffix("outbox.jsonl") }
            #expect(outboxWrites.count == 1, "one append for the group: \(outboxWrites.count)")
            #expect(!order[first...last].contains { $0.path.hasSuffix("outbox.jsonl") || $0.path.hasSuffix("state.db-wal") }, "nothing between the acknowledgements")
        }
        // Before the command ends, each file is flushed once, after its last write.
        for file in ["outbox.jsonl", "notifications.jsonl"] {
            let fsyncs = order.indices.filter { order[$0].call == "fsync" && order[$0].path.hasSuffix(file) }
            let lastWrite = try #require(order.lastIndex { $0.call == "write" && $0.path.hasSuffix(file) })
            #expect(fsyncs.count == 1 && fsyncs[0] > lastWrite, "\(file): one flush after the last write: \(fsyncs), last write \(lastWrite)")
        }
        let notifyWrite = try #require(order.lastIndex { $0.call == "write" && $0.path.hasSuffix("notifications.jsonl") })
        #expect(order[..<notifyWrite].contains { $0.call == "fdatasync" && $0.path.hasSuffix("state.db-wal") })
    }

    @Test func applyWritesTheCartTheDurableWay() throws {
        let playground = try Playground()
        _ = try basketSync(["-C", playground.path, "init"])
        try playground.write("cart.json", cartJSON([], syncedThrough: 0))
        _ = try basketSync(["-C", playground.path, "push", "A=+1"])
        _ = try basketSync(["-C", playground.path, "sync"])
        let log = playground.path + "/shim.log"
        #expect(try basketSync(["-C", playground.path, "apply"], environment: ["LD_PRELOAD": Self.shim, "FAULTSHIM_LOG": log]).status == 0)
        let order = steps(playground.read("shim.log")).filter { $0.path.contains("cart.json") || $0.call == "fsync" }
        let write = try #require(order.firstIndex { $0.call == "write" && $0.path.contains(".cart.json.") })
        let fsync = try #require(order.firstIndex { $0.call == "fsync" && $0.path.contains(".cart.json.") })
        let rename = try #require(order.firstIndex { $0.call == "rename" && $0.detail.hasSuffix("/cart.json") })
        let directory = try #require(order.lastIndex { $0.call == "fsync" && $0.path == playground.root.resolvingSymlinksInPath().path })
        #expect(write < fsync && fsync < rename && rename < directory, "\(order)")
    }

    @Test func aLostUnsyncedTailIsRecoveredFromTheDatabase() throws {
        let playground = try Playground()
        _ = try basketSync(["-C", playground.path, "init"])
        for index in 0..<3 { _ = try basketSync(["-C", playground.path, "push", "--id", "e\(index)", "A=+1"]) }
        _ = try basketSync(["-C", playground.path, "sync"])
        let synced = playground.read("outbox.jsonl")
        // A power loss keeps what was fsynced; say the last record and a half were not.
        let lines = synced.split(separator: "\n")
        try playground.write("outbox.jsonl", lines[0] + "\n" + lines[1].prefix(30))
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        #expect(playground.read("outbox.jsonl") == synced)
    }

    /// A line's fsync that fails: its record is durable already (the database), so the event
    /// stays filed; the line is taken back and written again, once, when the fault is lifted.
    @Test func aFailingFsyncTakesTheLineBackAndWritesItOnceWhenLifted() async throws {
        let playground = try Playground()
        _ = try basketSync(["-C", playground.path, "init"])
        let flag = playground.path + "/fault-on"
        try playground.write("fault-on", "")
        let agent = try AgentProcess(directory: playground.path, environment: [
            "LD_PRELOAD": Self.shim, "FAULTSHIM_EIO": "outbox.jsonl", "FAULTSHIM_WHILE": flag,
        ])
        try await agent.waitUntilWatching()
        // Two events, most often taken in two wake-ups: two appends to flush together, taken
        // back once (the file never extended past its end, which would leave a hole).
        _ = try basketSync(["-C", playground.path, "push", "--id", "e1", "A=+1"])
        _ = try basketSync(["-C", playground.path, "push", "--id", "e2", "B=+1"])
        try await eventually("the failure is reported") { agent.log.contains("outbox.jsonl: fsync failed: Input/output error") }
        try await eventually("the lines are taken back and written again") { agent.log.components(separatedBy: "fsync failed").count > 2 }
        try FileManager.default.removeItem(atPath: flag)
        #expect(playground.names("inbox/cur").count == 2, "the events are filed: their records are durable")
        try await eventually("the lines are written again once the fault is lifted") {
            playground.records("outbox.jsonl").map { $0["source"] as? String } == ["e1", "e2"]
        }
        #expect(agent.stop() == 0)
        #expect(playground.records("outbox.jsonl").map { $0["source"] as? String } == ["e1", "e2"], "once each")
        #expect(!agent.log.contains("hole"), "\(agent.log)")
    }

    /// In a tree, the notifications of a wake-up's carts are fsynced together: one that fails
    /// is taken back in its cart alone (the others keep theirs), and written once the fault is
    /// lifted — each cart's seq contiguous, nothing twice.
    @Test func inATreeAFailingFsyncTakesBackOnlyItsCartsLine() async throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init", "--tree"]).status == 0)
        let carts = ["c1", "c2", "c3"]
        for id in carts { #expect(try basketSync(["-C", playground.path + "/" + id, "push", "A=+1"]).status == 0) }
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        let flag = playground.path + "/fault-on"
        try playground.write("fault-on", "")
        let agent = try AgentProcess(directory: playground.path, environment: [
            "LD_PRELOAD": Self.shim, "FAULTSHIM_EIO": "c1/notifications.jsonl", "FAULTSHIM_WHILE": flag,
        ])
        try await agent.waitUntilWatching()
        // The three carts change at once: one wake-up takes them together.
        for id in carts { try playground.write("\(id)/.cart.tmp", cartJSON([("A", 1)], syncedThrough: 1)) }
        for id in carts { try FileManager.default.moveItem(atPath: playground.path + "/\(id)/.cart.tmp", toPath: playground.path + "/\(id)/cart.json") }
        try await eventually("c2 and c3 are notified") {
            playground.records("c2/notifications.jsonl").count == 1 && playground.records("c3/notifications.jsonl").count == 1
        }
        try await eventually("c1's failure is reported") { agent.log.contains("c1/notifications.jsonl: fsync failed: Input/output error") }
        #expect(!agent.log.contains("c2/notifications.jsonl: fsync failed") && !agent.log.contains("c3/notifications.jsonl: fsync failed"))
        try FileManager.default.removeItem(atPath: flag)
        try await eventually("c1 is notified once the fault is lifted") { playground.records("c1/notifications.jsonl").count == 1 }
        for id in carts {
            #expect(playground.records("\(id)/notifications.jsonl").map { $0["seq"] as? Int } == [1], "\(id): \(playground.read("\(id)/notifications.jsonl"))")
        }
        #expect(agent.stop() == 0)
    }

    /// A 4 MiB tmpfs at `path` (this suite runs as root, as CI does), initialized as a sync
    /// directory; nil, with the reason recorded, where mounting is not allowed.
    func smallSyncDirectory(_ path: String) throws -> String? {
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        guard mountCommand(["-t", "tmpfs", "-o", "size=4m", "tmpfs", path]) else {
            Issue.record("cannot mount a tmpfs here: this test needs root, as CI has")
            return nil
        }
        _ = try basketSync(["-C", path, "init"])
        return path
    }


    /// Fills the file system of `directory` with `directory/filler` (removing it makes room again).
    func fill(_ directory: String) throws {
        #expect(FileManager.default.createFile(atPath: directory + "/filler", contents: nil))
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: directory + "/filler"))
        let block = Data(count: 64 * 1024)
        while (try? handle.write(contentsOf: block)) != nil {}
        try? handle.close()
    }

    @Test func aFullDiskIsReportedRetriedAndRecoveredFrom() async throws {
        let playground = try Playground()
        guard let directory = try smallSyncDirectory(playground.path + "/small") else { return }
        defer { mountCommand(["-l", directory], program: "/bin/umount") }
        let agent = try AgentProcess(directory: directory)
        try await agent.waitUntilWatching()
        // Two events staged in tmp/ while there is room; then the disk fills up.
        for index in 0..<2 {
            try playground.write("small/inbox/tmp/e\(index)", "{\"id\":\"e\(index)\",\"type\":\"basketDelta\",\"products\":[{\"id\":\"A\",\"quantity\":1}]}")
        }
        try fill(directory)
        for index in 0..<2 {
            try FileManager.default.moveItem(atPath: directory + "/inbox/tmp/e\(index)", toPath: directory + "/inbox/new/e\(index)")
        }
        try await eventually("the full disk is reported") { agent.log.contains("free some disk space") || agent.log.contains("database or disk is full") }
        // The retry delay grows, and nothing (no wake-up of the agent's own) resets it.
        try await eventually("the retry delay doubles up to 4 s", timeout: 60) { agent.log.contains("retrying in 4.0 s") }
        let delays = agent.log.split(separator: "\n").compactMap { line -> Double? in
            guard let range = line.range(of: "retrying in ") else { return nil }
            return Double(line[range.upperBound...].prefix { $0 != " " })
        }
        #expect(Array(delays.prefix(4)) == [0.5, 1, 2, 4], "\(delays)")
        #expect(playground.names("small/inbox/cur").isEmpty, "nothing acknowledged without room to record it")
        for line in playground.read("small/outbox.jsonl").split(separator: "\n", omittingEmptySubsequences: false).dropLast() {
            #expect((try? JSONSerialization.jsonObject(with: Data(line.utf8))) != nil, "no torn line: \(line)")
        }
        try FileManager.default.removeItem(atPath: directory + "/filler")
        try await eventually("both events are taken once there is room", timeout: 90) { playground.names("small/inbox/cur").count == 2 }
        #expect(Set(playground.records("small/outbox.jsonl").compactMap { $0["source"] as? String }) == ["e0", "e1"])
        #expect(playground.records("small/outbox.jsonl").count == 2)
        #expect(agent.stop() == 0)
    }

    /// After a lasting fault (a full disk, the retry's back-off grown to 8 s and more), a pass
    /// that goes through — the cart changed once there is room again — brings the retry
    /// forward: the waiting events are taken then, not at the back-off's end (the log says so
    /// before any longer delay).
    @Test func aPassThatGoesThroughBringsTheRetryForward() async throws {
        let playground = try Playground()
        guard let directory = try smallSyncDirectory(playground.path + "/small") else { return }
        defer { mountCommand(["-l", directory], program: "/bin/umount") }
        let agent = try AgentProcess(directory: directory)
        try await agent.waitUntilWatching()
        try playground.write("small/inbox/tmp/e0", "{\"id\":\"e0\",\"type\":\"basketDelta\",\"products\":[{\"id\":\"A\",\"quantity\":1}]}")
        try fill(directory)
        try FileManager.default.moveItem(atPath: directory + "/inbox/tmp/e0", toPath: directory + "/inbox/new/e0")
        try await eventually("the back-off reaches 8 s", timeout: 60) { agent.log.contains("retrying in 8.0 s") }
        try FileManager.default.removeItem(atPath: directory + "/filler")
        try playground.writeAtomically("small/cart.json", cartJSON([("X", 1)]))
        try await eventually("the event is taken", timeout: 90) { playground.names("small/inbox/cur").count == 1 }
        let log = agent.log
        // The event is taken by the retry brought forward, not at the end of the last back-off
        // scheduled (whatever it was: an attempt at the instant the room came back may still
        // have failed and doubled it).
        let lines = log.split(separator: "\n")
        let lastBackOff = lines.lastIndex { $0.contains("retrying in ") }
        let broughtForward = lines.lastIndex { $0.contains("the retry is brought forward") }
        let taken = lines.firstIndex { $0.contains("outbox #1 updateBasket") }
        #expect(broughtForward != nil && taken != nil, "\(log)")
        if let lastBackOff, let broughtForward, let taken {
            #expect(lastBackOff < broughtForward && broughtForward < taken, "brought forward after the last back-off, then the event taken: \(log)")
        }
        #expect(agent.stop() == 0)
    }

    @Test func aReadOnlyFileSystemGetsAClearErrorAndChangesNothing() throws {
        let playground = try Playground()
        guard let directory = try smallSyncDirectory(playground.path + "/ro") else { return }
        defer { mountCommand(["-l", directory], program: "/bin/umount") }
        _ = try basketSync(["-C", directory, "push", "--id", "e1", "A=+1"])
        #expect(mountCommand(["-o", "remount,ro", directory]))
        let sync = try basketSync(["-C", directory, "sync"])
        #expect(sync.status == 73)
        #expect(sync.stderr.contains("state.db: open the database failed: Read-only file system; the file system is read-only, remount it read-write"), "\(sync.stderr)")
        #expect(playground.names("ro/inbox/new").count == 1)
        let push = try basketSync(["-C", directory, "push", "A=+1"])
        #expect(push.status == 73 || push.status == 75, "push: \(push.status) \(push.stderr)")
        #expect(push.stderr.contains("the file system is read-only, remount it read-write"))
        // status only reads: it works on a read-only file system.
        let status = try basketSync(["-C", directory, "status", "--json"])
        #expect(status.status == 0, "status: \(status.status) \(status.stderr)")
        #expect(status.stdout.contains("\"waiting\":1"))
        #expect(mountCommand(["-o", "remount,rw", directory]))
        #expect(try basketSync(["-C", directory, "sync"]).status == 0)
        #expect(playground.records("ro/outbox.jsonl").map { $0["source"] as? String } == ["e1"])
    }

    /// Runs the binary as the unprivileged user nobody.
    func asNobody(_ arguments: [String]) throws -> Run {
        try basketSync(["--reuid=65534", "--regid=65534", "--clear-groups", "--", binary.path] + arguments, executable: "/usr/bin/setpriv")
    }

    @Test func withoutPermissionTheErrorSaysSoAndAnUnprivilegedAgentWorks() async throws {
        let playground = try Playground()
        let directory = playground.path + "/shop"
        _ = try basketSync(["-C", directory, "init"])
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: playground.path)
        let denied = try asNobody(["-C", directory, "sync"])
        #expect(denied.status != 0)
        #expect(denied.status == 73)
        #expect(denied.stderr.contains("Permission denied; check the owner and the permissions of the file and its directory (basket-sync runs as uid 65534)"), "\(denied.stderr)")

        // Given its directory, nobody runs the agent happily.
        let chown = try Child.run(URL(fileURLWithPath: "/bin/chown"), arguments: ["-R", "65534:65534", directory])
        chown.waitUntilExit()
        #expect(try asNobody(["-C", directory, "push", "--id", "e1", "A=+1"]).status == 0)
        #expect(try asNobody(["-C", directory, "sync"]).status == 0)
        #expect(playground.records("shop/outbox.jsonl").map { $0["source"] as? String } == ["e1"])
        var info = stat()
        stat(directory + "/outbox.jsonl", &info)
        #expect(info.st_uid == 65534)
        #expect(info.st_mode & 0o777 == 0o640, "shared files are 0640 minus the umask (022 here)")
        stat(directory + "/.basket-sync/state.db", &info)
        #expect(info.st_mode & 0o777 == 0o600, "the database is private")
        stat(directory + "/.basket-sync", &info)
        #expect(info.st_mode & 0o777 == 0o700)

        // An entry the agent may not read is set aside in bad/, never
        // in the way of the entries behind it.
        #expect(try basketSync(["-C", directory, "push", "--id", "root-only", "A=+1"]).status == 0)
        #expect(try asNobody(["-C", directory, "push", "--id", "e2", "A=+1"]).status == 0)
        let sync = try asNobody(["-C", directory, "sync"])
        #expect(sync.status == 0 && sync.stdout.contains("1 bad"), "\(sync.stdout)\(sync.stderr)")
        #expect(playground.records("shop/outbox.jsonl").map { $0["source"] as? String } == ["e1", "e2"])
        #expect(playground.names("shop/inbox/new").isEmpty)
        let errors = playground.names("shop/inbox/bad").filter { $0.hasSuffix(".error") }
        #expect(errors.count == 1 && playground.read("shop/inbox/bad/" + errors[0]).contains("Permission denied"), "\(errors)")

        // One that cannot even be set aside (bad/ not writable by nobody) is
        // skipped and reported, the pass ending with its error (73) once the entries behind it
        // went on; bad/ gets no stray .error.
        #expect(Glibc.chown(directory + "/inbox/bad", 0, 0) == 0)
        #expect(try basketSync(["-C", directory, "push", "--id", "root-only-2", "A=+1"]).status == 0)
        #expect(try asNobody(["-C", directory, "push", "--id", "e3", "A=+1"]).status == 0)
        let skipped = try asNobody(["-C", directory, "sync"])
        #expect(skipped.status == 73 && skipped.stderr.contains("cannot be set aside in inbox/bad/"), "\(skipped)")
        #expect(playground.records("shop/outbox.jsonl").map { $0["source"] as? String } == ["e1", "e2", "e3"])
        #expect(playground.names("shop/inbox/new").count == 1, "the entry stays in new/")
        #expect(playground.names("shop/inbox/bad").filter { $0.hasSuffix(".error") }.count == 1, "no stray .error")
    }
}

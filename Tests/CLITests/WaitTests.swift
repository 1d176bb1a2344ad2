import Foundation
import Testing

/// `basket-sync wait`: a host blocks on it instead of polling the outbox.
@Suite struct WaitTests {
    /// A `wait` running in the background, its output in a file.
    final class Waiting {
        let child: Child
        let output: URL

        init(_ playground: Playground, _ arguments: [String]) throws {
            output = playground.root.deletingLastPathComponent().appendingPathComponent("wait-\(UUID().uuidString).out")
            child = try startedInBackground(["-C", playground.path, "wait"] + arguments, output: output.path)
        }

        deinit {
            if child.isRunning { kill(child.processIdentifier, SIGKILL) }
            child.waitUntilExit()
            try? FileManager.default.removeItem(at: output)
        }

        var seqs: [Int] {
            ((try? String(contentsOf: output, encoding: .utf8)) ?? "").split(separator: "\n").map { line in
                (try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])?["seq"] as? Int ?? -1
            }
        }

        /// Blocked in the kernel, on inotify: the channel it sleeps in is a poll.
        var isAsleep: Bool { sleepsInPoll(child) }

        var contextSwitches: Int {
            let status = (try? String(contentsOfFile: "/proc/\(child.processIdentifier)/status", encoding: .utf8)) ?? ""
            return status.split(separator: "\n").compactMap { line -> Int? in
                line.hasPrefix("voluntary_ctxt_switches:") ? Int(line.split(separator: ":")[1].trimmingCharacters(in: .whitespaces)) : nil
            }.first ?? -1
        }
    }

    func syncDirectory() throws -> Playground {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        return playground
    }

    @Test func withoutAnAgentItWakesOnTheCommitOfAnotherCommandAndNeverPolls() async throws {
        let playground = try syncDirectory()
        try playground.write("cart.json", cartJSON([("X", 1)], syncedThrough: 0))
        let waiting = try Waiting(playground, ["--timeout", "900"])
        try await eventually("wait is asleep") { waiting.isAsleep }
        // Time passing does not wake it: while 20 commands run on another sync directory (a few
        // hundred milliseconds), a poller would have woken many times.
        let elsewhere = try syncDirectory()
        let before = waiting.contextSwitches
        for _ in 0..<20 { #expect(try basketSync(["-C", elsewhere.path, "status"]).status == 0) }
        // A page of the program brought back from disk under memory pressure counts as a switch
        // too: a few are allowed, a poller would make dozens.
        #expect(waiting.contextSwitches - before <= 3, "wait woke \(waiting.contextSwitches - before) times: it must sleep, not poll")
        #expect(try basketSync(["-C", playground.path, "status"]).status == 0)
        #expect(try basketSync(["-C", playground.path, "push", "A=+1"]).status == 0)
        #expect(waiting.child.isRunning, "an event in the inbox is not yet an outbox record")
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        waiting.child.waitUntilExit()
        #expect(waiting.child.terminationStatus == 0)
        #expect(waiting.seqs == [1])
    }

    @Test func besideTheAgentItPrintsEveryRecordAfterTheHostsProgress() async throws {
        let playground = try syncDirectory()
        try playground.write("basket-sync.json", "{\"keys\": {\"syncedThrough\": \"progress\"}}")
        let agent = try AgentProcess(directory: playground.path)
        try await agent.waitUntilWatching()
        for delta in ["A=+1", "B=+2", "C=+3"] { #expect(try basketSync(["-C", playground.path, "push", delta]).status == 0) }
        try await eventually("three records") { playground.records("outbox.jsonl").count == 3 }
        // The host says, under its own key, that it processed the first record.
        try playground.writeAtomically("cart.json", "{\"products\": [{\"id\": \"A\", \"quantity\": 1}], \"progress\": 1}")
        let quick = try basketSync(["-C", playground.path, "wait", "--timeout", "0"])
        #expect(quick.status == 0)
        #expect(quick.stdout.split(separator: "\n").count == 2, "records 2 and 3: \(quick.stdout)")
        #expect(quick.stdout == playground.read("outbox.jsonl").split(separator: "\n").dropFirst().map { $0 + "\n" }.joined(), "the lines as the outbox holds them")

        let later = try Waiting(playground, ["--after", "3"])
        try await eventually("wait is asleep") { later.isAsleep }
        #expect(try basketSync(["-C", playground.path, "push", "--redirect"]).status == 0)
        later.child.waitUntilExit()
        #expect(later.child.terminationStatus == 0)
        #expect(later.seqs == [4], "the agent's append woke it")
        #expect(agent.stop() == 0)
    }

    /// On a read-only file system wait opens a connection per look: one kept open would read the
    /// same snapshot for ever.
    @Test func onAReadOnlyViewItSeesWhatIsCommittedElsewhere() async throws {
        let playground = try syncDirectory()
        let view = playground.root.deletingLastPathComponent().appendingPathComponent("ro-view-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: view, withIntermediateDirectories: false)
        defer { try? FileManager.default.removeItem(atPath: view) }
        guard mountCommand(["--bind", playground.path, view]) else {
            Issue.record("cannot bind-mount here: this test needs root, as CI has")
            return
        }
        defer { mountCommand(["-l", view], program: "/bin/umount") }
        #expect(mountCommand(["-o", "remount,bind,ro", view]))
        #expect(try basketSync(["-C", playground.path, "push", "A=+1"]).status == 0)
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        let output = playground.root.deletingLastPathComponent().appendingPathComponent("ro-wait-\(UUID().uuidString).out")
        _ = FileManager.default.createFile(atPath: output.path, contents: nil)
        defer { try? FileManager.default.removeItem(at: output) }
        let readOnly = try startedInBackground(["-C", view, "wait", "--after", "1", "--timeout", "900"], output: output.path)
        defer { if readOnly.isRunning { kill(readOnly.processIdentifier, SIGKILL) }; readOnly.waitUntilExit() }
        try await eventually("wait on the read-only view is asleep") { sleepsInPoll(readOnly) }
        #expect(try basketSync(["-C", playground.path, "push", "B=+1"]).status == 0)
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        readOnly.waitUntilExit()
        #expect(readOnly.terminationStatus == 0)
        let printed = ((try? String(contentsOf: output, encoding: .utf8)) ?? "").split(separator: "\n")
        #expect(printed.count == 1 && printed[0].hasPrefix("{\"seq\":2,"), "record 2, committed through the read-write path, is seen through the read-only one: \(printed)")
    }

    /// A read-only view beside a running agent reads the database's write-ahead log (its index
    /// is there): the host's progress is the latest — a record the host applied (echoed) is not
    /// listed again, and `status` there says nothing of a database behind. A copy without the
    /// log's index reads behind: `status` says so (never a database lost) and `wait` will not
    /// guess the progress (75) unless given `--after`.
    @Test func aReadOnlyViewNeverTakesTheHostsProgressFromCommitsItCannotSee() async throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        try playground.writeAtomically("cart.json", cartJSON([("A", 1)]))
        let agent = try AgentProcess(directory: playground.path)
        try await agent.waitUntilWatching()
        #expect(try basketSync(["-C", playground.path, "push", "A=+2"]).status == 0)
        try await eventually("the agent sends the delta") { playground.records("outbox.jsonl").count == 1 }
        try playground.writeAtomically("cart.json", cartJSON([("A", 3)]))
        try await eventually("the host's echo is taken") {
            (try? basketSync(["-C", playground.path, "status"]))?.stdout.contains("host progress: 1 of 1") == true
        }
        var views: [String] = []
        defer { for view in views { mountCommand(["-l", view], program: "/bin/umount"); try? FileManager.default.removeItem(atPath: view) } }
        func readOnlyView(of directory: String) throws -> String {
            let view = playground.root.deletingLastPathComponent().appendingPathComponent("ro-view-\(UUID().uuidString)").path
            try FileManager.default.createDirectory(atPath: view, withIntermediateDirectories: false)
            views.append(view)
            try #require(mountCommand(["--bind", directory, view]), "this test needs root, as CI has")
            #expect(mountCommand(["-o", "remount,bind,ro", view]))
            return view
        }
        let view = try readOnlyView(of: playground.path)
        let waited = try basketSync(["-C", view, "wait", "--timeout", "0"])
        #expect(waited.status == 75 && waited.stdout.isEmpty, "nothing after the host's progress: \(waited.stdout) \(waited.stderr)")
        let status = try basketSync(["-C", view, "status"])
        #expect(status.status == 0 && status.stdout.contains("host progress: 1 of 1") && !status.stdout.contains("behind"), "\(status.stdout)")

        // A copy of the directory taken while the agent runs, without the log's index.
        let copy = try Playground()
        let copied = try Child.run(URL(fileURLWithPath: "/bin/sh"), arguments: ["-c", "cp -a '\(playground.path)/.' '\(copy.path)/' && rm -f '\(copy.path)/.basket-sync/state.db-shm'"])
        copied.waitUntilExit()
        #expect(agent.stop() == 0)
        let walSize = (try? FileManager.default.attributesOfItem(atPath: copy.path + "/.basket-sync/state.db-wal")[.size] as? Int) ?? 0
        try #require(walSize > 0, "the copy's write-ahead log holds the agent's commits")
        let behind = try readOnlyView(of: copy.path)
        let said = try basketSync(["-C", behind, "status"])
        #expect(said.stdout.contains("read without its last commits") && !said.stdout.contains("was lost"), "\(said.stdout) \(said.stderr)")
        #expect(said.stdout.contains("host progress: unknown here"), "no progress it cannot know: \(said.stdout)")
        let json = try basketSync(["-C", behind, "status", "--json"])
        #expect(json.stdout.contains("\"hostProgress\":null"), "\(json.stdout.prefix(600))")
        let metrics = try basketSync(["-C", behind, "metrics"])
        #expect(metrics.stdout.contains("basket_sync_errors{directory=\"\(behind)\"} 1"), "counted among the errors: \(metrics.stdout)")
        let guessed = try basketSync(["-C", behind, "wait", "--timeout", "0"])
        #expect(guessed.status == 75 && guessed.stdout.isEmpty && guessed.stderr.contains("--after"), "\(guessed.stdout) \(guessed.stderr)")
        let given = try basketSync(["-C", behind, "wait", "--after", "0", "--timeout", "0"])
        #expect(given.status == 0 && given.stdout.hasPrefix("{\"seq\":1,"), "the records from outbox.jsonl: \(given.stdout) \(given.stderr)")
    }

    /// The directory removed under wait ends it (66); a
    /// database behind the outbox stops it (74), as it stops the commands that write.
    @Test func aRemovedDirectoryOrADatabaseBehindTheOutboxEndsIt() async throws {
        let playground = try syncDirectory()
        // Not inside the other sync directory: nothing is made inside one but a tree's carts.
        let elsewhere = try Playground()
        let directory = elsewhere.path + "/gone"
        #expect(try basketSync(["-C", directory, "init"]).status == 0)
        let child = try startedInBackground(["-C", directory, "wait"])
        defer { if child.isRunning { kill(child.processIdentifier, SIGKILL) }; child.waitUntilExit() }
        try await eventually("wait is asleep") { sleepsInPoll(child) }
        let remove = try Child.run(URL(fileURLWithPath: "/bin/rm"), arguments: ["-rf", directory])
        remove.waitUntilExit()
        try await eventually("wait ends") { !child.isRunning }
        #expect(child.terminationStatus == 66)

        // A database restored from before record 2.
        #expect(try basketSync(["-C", playground.path, "push", "A=+1"]).status == 0)
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        let backup = playground.root.deletingLastPathComponent().appendingPathComponent("backup-\(UUID().uuidString)").path
        try FileManager.default.copyItem(atPath: playground.path + "/.basket-sync", toPath: backup)
        defer { try? FileManager.default.removeItem(atPath: backup) }
        #expect(try basketSync(["-C", playground.path, "push", "A=+1"]).status == 0)
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        try FileManager.default.copyItem(atPath: playground.path + "/.basket-sync", toPath: backup + "-later")
        defer { try? FileManager.default.removeItem(atPath: backup + "-later") }
        try FileManager.default.removeItem(atPath: playground.path + "/.basket-sync")
        try FileManager.default.copyItem(atPath: backup, toPath: playground.path + "/.basket-sync")
        let behind = try basketSync(["-C", playground.path, "wait", "--after", "1", "--timeout", "5"])
        #expect(behind.status == 74, "\(behind.stderr)")
        #expect(behind.stderr.contains("outbox.jsonl"), "\(behind.stderr)")

        // A backup copied over the database under a blocked wait.
        try FileManager.default.removeItem(atPath: playground.path + "/.basket-sync")
        try FileManager.default.copyItem(atPath: backup + "-later", toPath: playground.path + "/.basket-sync")
        let blocked = try startedInBackground(["-C", playground.path, "wait", "--after", "2"])
        defer { if blocked.isRunning { kill(blocked.processIdentifier, SIGKILL) }; blocked.waitUntilExit() }
        try await eventually("wait is asleep") { sleepsInPoll(blocked) }
        let copy = try Child.run(URL(fileURLWithPath: "/bin/cp"), arguments: [backup + "/state.db", playground.path + "/.basket-sync/state.db"])
        copy.waitUntilExit()
        try await eventually("wait sees the database restored under it") { !blocked.isRunning }
        #expect(blocked.terminationStatus == 74)
    }

    @Test func aTimeoutExits75AndBadArgumentsAreUsageErrors() throws {
        let playground = try syncDirectory()
        let timedOut = try basketSync(["-C", playground.path, "wait", "--timeout", "0.2"])
        #expect(timedOut.status == 75)
        #expect(timedOut.stderr.contains("outbox.jsonl: no record after seq 0 within 0.2 s"), "\(timedOut.stderr)")
        #expect(timedOut.stdout.isEmpty)
        // Seconds as people write them, in decimal: no sign, exponent, hexadecimal float or space.
        for bad in [["--after", "-1"], ["--after", "x"], ["--timeout", "-1"], ["--timeout", "nan"], ["--timeout", "inf"], ["extra"],
                    ["--timeout", "0x10"], ["--timeout", "0x1p-2"], ["--timeout", "-0"], ["--timeout", "1e3"], ["--timeout", "+1"], ["--timeout", " 1"], ["--timeout", "."]] {
            let run = try basketSync(["-C", playground.path, "wait"] + bad)
            #expect(run.status == 64, "\(bad): \(run.stderr)")
        }
        let missing = try basketSync(["-C", playground.path + "/nowhere", "wait", "--timeout", "0"])
        #expect(missing.status == 66, "\(missing.stderr)")
    }

    /// `wait --timeout` counts its seconds on the monotonic clock: the wall clock set back an hour
    /// while it waits (faketime, the process's clock alone) neither holds it nor ends it early.
    @Test func aTimeoutIsCountedOnTheMonotonicClock() throws {
        let playground = try syncDirectory()
        let clock = playground.path + "/clock"
        try "+0".write(toFile: clock, atomically: true, encoding: .utf8)
        let output = playground.path + "/wait.err"
        let waiting = Child()
        waiting.executableURL = URL(fileURLWithPath: "/usr/bin/faketime")
        waiting.arguments = ["-f", "+0", "/usr/bin/env", "-u", "FAKETIME", "FAKETIME_TIMESTAMP_FILE=\(clock)", "FAKETIME_NO_CACHE=1",
                             "FAKETIME_DONT_FAKE_MONOTONIC=1", "SWIFT_BACKTRACE=enable=no", binary.path, "-C", playground.path, "wait", "--timeout", "2"]
        waiting.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: { _ = FileManager.default.createFile(atPath: output, contents: nil); return output }()))
        try waiting.run()
        Thread.sleep(forTimeInterval: 0.5)
        try "-3600s".write(toFile: clock, atomically: true, encoding: .utf8)
        // Generous: it ends within its 2 s; set back an hour on the wall clock, it would not.
        let deadline = Date().addingTimeInterval(120)
        while waiting.isRunning, Date() < deadline { Thread.sleep(forTimeInterval: 0.1) }
        if waiting.isRunning { kill(waiting.processIdentifier, SIGKILL) }
        waiting.waitUntilExit()
        #expect(waiting.terminationStatus == 75, "\(waiting.terminationStatus): \((try? String(contentsOfFile: output, encoding: .utf8)) ?? "")")
    }

    /// `wait` prints only records whose line a file holds: one committed while another process
    /// holds the writers' lock (a `sync` held up after its commit) is not printed until its line
    /// is appended — a host reading outbox.jsonl after `wait` finds what it printed, and a loop
    /// `while wait; do read-the-outbox; done` does not spin meanwhile.
    @Test func aRecordIsPrintedOnlyOnceItsLineIsInTheOutbox() async throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        #expect(try basketSync(["-C", playground.path, "push", "A=+1"]).status == 0)
        // The writers' lock, held as another basket-sync process would hold it.
        let held = open(playground.path + "/.basket-sync/projections.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        try #require(held >= 0 && flock(held, LOCK_EX) == 0)
        defer { close(held) }
        let sync = try startedInBackground(["-C", playground.path, "sync"])
        try await eventually("the record is committed") { playground.databaseRows("SELECT seq FROM outbox") == [["1"]] }
        #expect(playground.records("outbox.jsonl").isEmpty, "its line waits for the lock")
        let early = try basketSync(["-C", playground.path, "wait", "--after", "0", "--timeout", "0.5"])
        #expect(early.status == 75 && early.stdout.isEmpty, "nothing printed before its line: \(early)")
        #expect(flock(held, LOCK_UN) == 0)
        // Its own end (the line appended, or busy once it waited 10 s) is not what is tested: a
        // catch-up now writes the line if it did not.
        sync.waitUntilExit()
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        let later = try basketSync(["-C", playground.path, "wait", "--after", "0", "--timeout", "10"])
        #expect(later.status == 0 && later.stdout.contains("\"seq\":1"), "\(later)")
    }

    /// A cart `apply` cannot read holds the records back: `wait` (taking the host's progress
    /// from the cart) lists nothing while the cart does not parse — the host's apply would fail
    /// on it at once and a loop on `wait` would run again and again — says so once, and lists
    /// the records once the cart is mended: the mending write wakes it.
    @Test func aCartThatCannotBeReadHoldsTheRecordsBackUntilItIsMended() async throws {
        let playground = try syncDirectory()
        try playground.write("cart.json", cartJSON([("X", 1)], syncedThrough: 0))
        #expect(try basketSync(["-C", playground.path, "push", "A=+1"]).status == 0)
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        try playground.write("cart.json", "{\"products\": [\n")
        let early = try basketSync(["-C", playground.path, "wait", "--timeout", "0.5"])
        #expect(early.status == 75 && early.stdout.isEmpty, "\(early)")
        #expect(early.stderr.contains("not listed until the cart can be read") && early.stderr.contains("cart.json:2:1"), "\(early.stderr)")
        let waiting = try Waiting(playground, ["--timeout", "900"])
        try await eventually("wait is asleep") { waiting.isAsleep }
        #expect(waiting.seqs.isEmpty)
        try playground.writeAtomically("cart.json", cartJSON([("X", 1)], syncedThrough: 0))
        waiting.child.waitUntilExit()
        #expect(waiting.child.terminationStatus == 0)
        #expect(waiting.seqs == [1], "listed once the cart is mended")
    }

    /// A host killed while it waits leaves no `wait` behind: the command ends with the process
    /// that started it (it would otherwise block for its whole timeout).
    @Test func waitEndsWithTheProcessThatStartedIt() async throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        let host = Child()
        host.executableURL = URL(fileURLWithPath: "/bin/sh")
        host.arguments = ["-c", "'\(binary.path)' -C '\(playground.path)' wait --timeout 600 >/dev/null 2>&1 & echo $!; wait"]
        let out = Pipe()
        host.standardOutput = out
        try host.run()
        var text = ""
        try await eventually("the host says its wait's pid") {
            text += String(decoding: out.fileHandleForReading.availableData, as: UTF8.self)
            return text.contains("\n")
        }
        let pid = try #require(Int32(text.trimmingCharacters(in: .whitespacesAndNewlines)))
        // Waiting: its inotify instance open (what it started from is known by then).
        try await eventually("the wait waits") {
            ((try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd")) ?? []).contains { fd in
                (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/fd/\(fd)"))?.contains("inotify") == true
            }
        }
        kill(host.processIdentifier, SIGKILL)
        host.waitUntilExit()
        // Ended: gone, or a zombie its new parent has not reaped yet.
        func ended() -> Bool {
            let stat = (try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)) ?? ""
            return stat.isEmpty || stat.split(separator: ")").last?.split(separator: " ").first == "Z"
        }
        try? await eventually("the wait ends with its host", timeout: 60) { ended() }
        // Where it is held, should it still run: its threads and what each waits in.
        func whereHeld() -> String {
            let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
            return tasks.map { task in
                let read = { (name: String) in ((try? String(contentsOfFile: "/proc/\(pid)/task/\(task)/\(name)", encoding: .utf8)) ?? "").trimmingCharacters(in: .whitespacesAndNewlines) }
                return "task \(task): wchan \(read("wchan")), syscall \(read("syscall"))"
            }.joined(separator: "\n")
        }
        #expect(ended(), "\((try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)) ?? "")\n\(whereHeld())")
    }
}

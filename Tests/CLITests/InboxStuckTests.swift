import Foundation
import Testing

/// An inbox entry that cannot leave `inbox/new/` — `cur/` or `bad/` removed, or not writable by
/// the agent's account — never makes the agent read it again at every wake-up: a missing folder is
/// made again (as `init` makes it); one that cannot be written ends the pass with the entry's
/// error, said in `status` while the entry waits, and the pass is tried again after the agent's
/// back-off (0.5, 1, 2, 4 s …). Once the folder takes it, the entry is filed, done once. The agent
/// runs as an account of its own (root writes anything), its directory that account's.
@Suite(.serialized) struct InboxStuckTests {
    /// A sync directory of `Account.agent`'s, with its agent running as that account.
    func served() async throws -> (Playground, String, AgentProcess) {
        let playground = try Playground()
        chmod(playground.path, 0o755)
        let directory = playground.path + "/shop"
        #expect(mkdir(directory, 0o755) == 0 && chown(directory, Account.agent.uid, Account.agent.gid) == 0)
        #expect(try Account.agent.basketSync(["-C", directory, "init"]).status == 0)
        let agent = try AgentProcess(directory: directory, user: Account.agent.uid)
        try await agent.waitUntilWatching()
        return (playground, directory, agent)
    }

    func names(_ folder: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []).filter { !$0.hasPrefix(".") }.sorted()
    }

    func inboxError(_ directory: String) throws -> String? {
        let status = try Account.agent.basketSync(["-C", directory, "status", "--json"])
        let object = try JSONSerialization.jsonObject(with: Data(status.stdout.utf8)) as? [String: Any]
        return ((object?["health"] as? [String: Any])?["errors"] as? [String: Any])?["inbox"] as? String
    }

    /// Two events pushed one after the other (the second while the first is stuck).
    func pushTwo(_ directory: String) throws {
        for id in ["q1", "q2"] { #expect(try Account.agent.basketSync(["-C", directory, "push", "--id", id, "A=+1"]).status == 0) }
    }

    /// How many times the agent said it took an entry again: a hot loop says it thousands of times.
    func againCount(_ agent: AgentProcess) -> Int { agent.log.components(separatedBy: "acknowledged again, not done again").count - 1 }

    @Test func curRemovedUnderTheAgentIsMadeAgain() async throws {
        let (playground, directory, agent) = try await served()
        _ = playground
        #expect(rmdir(directory + "/inbox/cur") == 0)
        try pushTwo(directory)
        try await eventually("both events filed in a cur/ made again") { names(directory + "/inbox/cur").count == 2 && names(directory + "/inbox/new").isEmpty }
        #expect(againCount(agent) == 0, "\(agent.log)")
        #expect(playground.records("shop/outbox.jsonl").count == 2)
        #expect(agent.stop() == 0)
    }

    @Test(arguments: ["cur", "bad"])
    func aFolderTheAgentCannotWriteIsSaidAndTriedAfterItsBackOff(folder: String) async throws {
        let (playground, directory, agent) = try await served()
        #expect(chmod(directory + "/inbox/" + folder, 0o555) == 0)
        if folder == "cur" {
            try pushTwo(directory)
        } else {
            // Two entries bad/ must take: not JSON.
            for name in ["junk1", "junk2"] {
                try playground.write("shop/inbox/tmp/\(name)", "not an event")
                #expect(rename(directory + "/inbox/tmp/" + name, directory + "/inbox/new/" + name) == 0)
            }
        }
        // The back-off reaches 4 s: the pass failed four times, not thousands.
        try await eventually("the agent backs off", timeout: 60) { agent.log.contains("retrying in 4.0 s") }
        let stuck = try inboxError(directory)
        #expect(stuck?.contains(directory + "/inbox/new/") == true && stuck?.contains("inbox/\(folder)") == true, "status: \(stuck ?? "no inbox error")")
        #expect(names(directory + "/inbox/new").count == 2)
        if folder == "cur" { #expect(againCount(agent) <= 2 * 6, "read again at every wake-up: \(againCount(agent)) times") }
        #expect(agent.log.components(separatedBy: "\n").count < 100, "the log stays quiet: \(agent.log.components(separatedBy: "\n").count) lines")
        // The folder writable again: filed at the next try, done once, status clear.
        #expect(chmod(directory + "/inbox/" + folder, 0o755) == 0)
        try await eventually("the entries are filed", timeout: 60) { names(directory + "/inbox/new").isEmpty }
        if folder == "cur" {
            #expect(names(directory + "/inbox/cur").count == 2)
            #expect(playground.records("shop/outbox.jsonl").count == 2, "each event done once")
        } else {
            #expect(names(directory + "/inbox/bad").filter { !$0.hasSuffix(".error") }.count == 2)
        }
        try await eventually("status clears") { try inboxError(directory) == nil }
        #expect(agent.stop() == 0)
    }
}

extension InboxStuckTests {
    /// An entry whose deliverer holds a lease on it (`F_SETLEASE`: an open that does not block
    /// gets EAGAIN) is said as that — who holds it and that it is tried again — and once the
    /// lease is let go and the entry taken, `status` says the error resolved by that, never
    /// "set aside in inbox/bad/" when nothing was.
    @Test func anEntryHeldByALeaseIsSaidSoAndResolvedWhenTaken() async throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        let name = "1796534700.M1P1Q1.host"
        try playground.write("inbox/tmp/" + name, #"{"id":"L1","type":"basketDelta","products":[{"id":"A","quantity":1}]}"#)
        let script = """
            import fcntl, os, signal, sys, time
            signal.signal(signal.SIGIO, signal.SIG_IGN)
            fd = os.open(sys.argv[1], os.O_RDONLY)
            fcntl.fcntl(fd, 1024, fcntl.F_WRLCK)
            open(sys.argv[2], "w").close()
            while not os.path.exists(sys.argv[3]): time.sleep(0.02)
            """
        let holder = Process()
        holder.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        holder.arguments = ["-c", script, playground.path + "/inbox/tmp/" + name, playground.path + "/leased", playground.path + "/release"]
        try holder.run()
        defer { if holder.isRunning { try? playground.write("release", ""); holder.waitUntilExit() } }
        try await eventually("the lease is held") { FileManager.default.fileExists(atPath: playground.path + "/leased") }
        #expect(rename(playground.path + "/inbox/tmp/" + name, playground.path + "/inbox/new/" + name) == 0)
        let held = try basketSync(["-C", playground.path, "sync"])
        #expect(held.status == 75 && held.stderr.contains("holds a lease on the file") && held.stderr.contains("tries again later"), "\(held.status) \(held.stderr)")
        try playground.write("release", "")
        holder.waitUntilExit()
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        #expect(playground.names("inbox/cur") == [name] && playground.names("inbox/bad").isEmpty)
        let status = try basketSync(["-C", playground.path, "status", "--json"])
        let lastError = (try JSONSerialization.jsonObject(with: Data(status.stdout.utf8)) as? [String: Any])?["lastError"] as? [String: Any]
        #expect(lastError?["current"] as? Bool == false && (lastError?["standing"] as? String)?.contains("taken since") == true, "\(status.stdout)")
    }

    /// `status` says where an entry set aside went, whatever its error's message holds after the
    /// name (a place `:LINE:COLUMN:` or the reason) and whatever colons the name holds itself (a
    /// Maildir name's `:2,S`): still in `inbox/bad/`, then moved away once it left.
    @Test(arguments: ["1796552600.M1P1Q1.host", "1796552600.M1P1Q2.host:2,S", "1796552600.M1P1Q3.host:2,"])
    func statusSaysAnEntrySetAsideIsInBad(name: String) throws {
        for (body, shape) in [(#"{"id":"e1","type":"basketDelta","products":[{"id":"a","quantity":"x"}]}"#, "a place"), ("[]", "no place"), ("{", "a torn line")] {
            let playground = try Playground()
            #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
            try playground.write("inbox/tmp/" + name, body)
            #expect(rename(playground.path + "/inbox/tmp/" + name, playground.path + "/inbox/new/" + name) == 0)
            _ = try basketSync(["-C", playground.path, "sync"])
            #expect(playground.names("inbox/bad").contains(name), "\(shape): \(playground.names("inbox/bad"))")
            func standing() throws -> String {
                let status = try basketSync(["-C", playground.path, "status", "--json"])
                let lastError = (try JSONSerialization.jsonObject(with: Data(status.stdout.utf8)) as? [String: Any])?["lastError"] as? [String: Any]
                return "\(lastError?["message"] ?? "") — \(lastError?["standing"] ?? "")"
            }
            let setAside = try standing()
            #expect(setAside.contains("set aside in inbox/bad/ with a .error file"), "\(name), \(shape): \(setAside)")
            for file in [name, name + ".error"] { #expect(unlink(playground.path + "/inbox/bad/" + file) == 0) }
            let gone = try standing()
            #expect(gone.contains("moved away"), "\(name), \(shape): \(gone)")
        }
    }
}

import Foundation
import Testing

/// Whoever writes the sync directory can make basket-sync refuse work, never read, write,
/// truncate or change the mode of a file outside it, nor hang it (SPEC §7). A matrix: each path
/// basket-sync reads or writes × each shape a writer of the directory can give it × each command.
@Suite struct FileShapeTests {
    /// A file outside the sync directory that nothing may touch.
    struct Canary {
        let path: String
        let bytes: Data
        let attributes: [FileAttributeKey: Any]

        init(in directory: String) throws {
            path = directory + "/canary.json"
            bytes = Data(#"{"products":[{"id":"secret-s3cr3t","quantity":1}],"syncedThrough":0}"#.utf8)
            try bytes.write(to: URL(fileURLWithPath: path))
            chmod(path, 0o600)
            attributes = try FileManager.default.attributesOfItem(atPath: path)
        }

        /// Why the canary is not as it was, if it is not.
        func damage() -> String? {
            guard let now = try? FileManager.default.attributesOfItem(atPath: path) else { return "the canary is gone" }
            if FileManager.default.contents(atPath: path) != bytes { return "the canary's bytes changed" }
            if (now[.posixPermissions] as? Int) != (attributes[.posixPermissions] as? Int) { return "the canary's mode changed" }
            if (now[.modificationDate] as? Date) != (attributes[.modificationDate] as? Date) { return "the canary's mtime changed" }
            return nil
        }
    }

    enum Shape: String, CaseIterable {
        case linkOutside = "a symbolic link to a file outside"
        case danglingLink = "a dangling symbolic link"
        case fifo = "a FIFO"
        case directory = "a directory"
        case deviceLink = "a symbolic link to /dev/zero"

        func make(at path: String, canary: Canary) throws {
            try? FileManager.default.removeItem(atPath: path)
            switch self {
            case .linkOutside: try FileManager.default.createSymbolicLink(atPath: path, withDestinationPath: canary.path)
            case .danglingLink: try FileManager.default.createSymbolicLink(atPath: path, withDestinationPath: "/nonexistent/basket-sync")
            case .fifo: guard mkfifo(path, 0o644) == 0 else { throw CocoaError(.fileWriteUnknown) }
            case .directory: try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
            case .deviceLink: try FileManager.default.createSymbolicLink(atPath: path, withDestinationPath: "/dev/zero")
            }
        }
    }

    static let paths = ["cart.json", "outbox.jsonl", "notifications.jsonl", "payments.jsonl", "inbox/new/evt-shape", "basket-sync.json"]
    static let commands: [[String]] = [["sync"], ["apply"], ["status"], ["payment-started", "--total", "1.00"], ["validate", "cart.json"]]

    @Test(arguments: paths)
    func noShapeOfAFileMakesACommandHangOrTouchAFileOutside(path: String) throws {
        var tried = 0
        for shape in Shape.allCases {
            for command in Self.commands {
                let playground = try Playground()
                let outside = try Playground()
                let canary = try Canary(in: outside.path)
                let dir = playground.path + "/sync"
                #expect(try basketSync(["-C", dir, "init"]).status == 0)
                // Something to apply and publish, so that every file is opened.
                #expect(try basketSync(["-C", dir, "push", "--id", "e1", "A=+1"]).status == 0)
                #expect(try basketSync(["-C", dir, "sync"]).status == 0)
                try shape.make(at: dir + "/" + path, canary: canary)
                let context = "\(path) as \(shape.rawValue), \(command.joined(separator: " "))"
                guard let run = try basketSync(["-C", dir] + command, killAfter: 20) else {
                    Issue.record("\(context): still running after 20 s (a hang)")
                    continue
                }
                tried += 1
                #expect([0, 64, 65, 66, 73, 74, 75, 78].contains(run.status), "\(context): exit \(run.status): \(run.stderr)")
                #expect(run.status < 128, "\(context): killed by a signal")
                #expect(canary.damage() == nil, "\(context): \(canary.damage() ?? "")")
                #expect(!run.stdout.contains("s3cr3t") && !run.stderr.contains("s3cr3t"), "\(context): the outside file's content leaked: \(run.stdout) \(run.stderr)")
                let bad = (try? String(contentsOfFile: dir + "/inbox/bad/evt-shape.error", encoding: .utf8)) ?? ""
                #expect(!bad.contains("s3cr3t"), "\(context): the outside file's content leaked into bad/")
                if run.status != 0, !run.stderr.isEmpty {
                    #expect(run.stderr.hasPrefix("basket-sync: "), "\(context): \(run.stderr)")
                }
            }
        }
        #expect(tried == Shape.allCases.count * Self.commands.count)
    }

    /// S1: a JSON Lines file replaced by a link to a file outside is refused, never cut or appended to.
    @Test func aProjectionThatIsALinkIsRefusedNotWrittenThrough() throws {
        let playground = try Playground()
        let canary = try Canary(in: playground.path)
        let dir = playground.path + "/sync"
        _ = try basketSync(["-C", dir, "init"])
        try FileManager.default.createSymbolicLink(atPath: dir + "/outbox.jsonl", withDestinationPath: canary.path)
        _ = try basketSync(["-C", dir, "push", "A=+1"])
        let sync = try basketSync(["-C", dir, "sync"])
        #expect(sync.status == 73)
        #expect(sync.stderr.contains("outbox.jsonl: is a symbolic link, not a regular file"), "\(sync.stderr)")
        #expect(canary.damage() == nil)
    }

    /// S3: `followSymlinks: true` and a cart that is a link: `apply` writes the target, atomically,
    /// keeping its mode; the link stays a link.
    @Test func applyWritesTheTargetOfAFollowedCartKeepingItsMode() throws {
        let playground = try Playground()
        let dir = playground.path
        _ = try basketSync(["-C", dir, "init"])
        try playground.write("basket-sync.json", #"{"followSymlinks": true}"#)
        try playground.write("real-cart.json", cartJSON([("X", 1)], syncedThrough: 0))
        chmod(dir + "/real-cart.json", 0o600)
        try FileManager.default.createSymbolicLink(atPath: dir + "/cart.json", withDestinationPath: "real-cart.json")
        _ = try basketSync(["-C", dir, "push", "A=+2"])
        _ = try basketSync(["-C", dir, "sync"])
        let apply = try basketSync(["-C", dir, "apply"])
        #expect(apply.status == 0, "\(apply.stderr)")
        #expect((try? FileManager.default.destinationOfSymbolicLink(atPath: dir + "/cart.json")) == "real-cart.json", "the link stays a link")
        #expect(playground.read("real-cart.json").contains("\"A\""))
        let mode = (try FileManager.default.attributesOfItem(atPath: dir + "/real-cart.json"))[.posixPermissions] as? Int
        #expect(mode == 0o600)
    }

    /// S2: the `.error` file of a quarantined event is made under a name nobody can guess: a link
    /// planted under the old predictable name is never written through.
    @Test func aPlantedLinkUnderTheOldTemporaryNameIsNeverWrittenThrough() throws {
        let playground = try Playground()
        let canary = try Canary(in: playground.path)
        let dir = playground.path + "/sync"
        _ = try basketSync(["-C", dir, "init"])
        for pid in 1...64 {
            try? FileManager.default.createSymbolicLink(atPath: dir + "/inbox/bad/.evil.error.\(pid).tmp", withDestinationPath: canary.path)
        }
        try FileManager.default.createSymbolicLink(atPath: dir + "/inbox/bad/evil.error", withDestinationPath: "/nonexistent")
        try "{not json".write(toFile: dir + "/inbox/new/evil", atomically: false, encoding: .utf8)
        #expect(try basketSync(["-C", dir, "sync"]).status == 0)
        #expect(FileManager.default.fileExists(atPath: dir + "/inbox/bad/evil"))
        let error = try FileManager.default.attributesOfItem(atPath: dir + "/inbox/bad/evil.error")
        #expect(error[.type] as? FileAttributeType == .typeRegular, "the link was replaced, not followed")
        #expect(error[.posixPermissions] as? Int == 0o640, "a fixed mode, never one read from a link")
        #expect(canary.damage() == nil)
    }

    /// H2: an event whose name is too long for its `.error`, or whose name `bad/` already holds as
    /// a directory, is set aside under another name; the events behind it are taken.
    @Test func anEventThatCannotBeSetAsideUnderItsNameNeverBlocksTheInbox() throws {
        let playground = try Playground()
        let dir = playground.path
        _ = try basketSync(["-C", dir, "init"])
        let long = String(repeating: "x", count: 250)
        try "{not json".write(toFile: dir + "/inbox/new/0" + long, atomically: false, encoding: .utf8)
        try FileManager.default.createDirectory(atPath: dir + "/inbox/bad/1-taken/inside", withIntermediateDirectories: true)
        try "[]".write(toFile: dir + "/inbox/new/1-taken", atomically: false, encoding: .utf8)
        _ = try basketSync(["-C", dir, "push", "--id", "behind", "A=+1"])
        let sync = try basketSync(["-C", dir, "sync"])
        #expect(sync.status == 0, "\(sync.stderr)")
        #expect(playground.names("inbox/new").isEmpty)
        #expect(playground.records("outbox.jsonl").count == 1, "the event behind them is taken")
        #expect(playground.names("inbox/bad").filter { $0.hasSuffix(".error") }.count == 2)
    }

    /// S4, H1: a link or a FIFO delivered into `inbox/new/` is set aside unread; the events behind
    /// it are taken.
    @Test func aLinkOrAFIFOInTheInboxIsSetAsideUnread() throws {
        let playground = try Playground()
        let canary = try Canary(in: playground.path)
        let dir = playground.path + "/sync"
        _ = try basketSync(["-C", dir, "init"])
        try FileManager.default.createSymbolicLink(atPath: dir + "/inbox/new/0-link", withDestinationPath: canary.path)
        #expect(mkfifo(dir + "/inbox/new/1-fifo", 0o644) == 0)
        _ = try basketSync(["-C", dir, "push", "--id", "after", "A=+1"])
        guard let sync = try basketSync(["-C", dir, "sync"], killAfter: 20) else {
            Issue.record("sync hung on a FIFO in the inbox")
            return
        }
        #expect(sync.status == 0, "\(sync.stderr)")
        #expect(Set(playground.names("sync/inbox/bad")).isSuperset(of: ["0-link", "1-fifo"]))
        #expect(playground.records("sync/outbox.jsonl").count == 1, "the event behind them is taken")
        #expect(!sync.stderr.contains("s3cr3t") && !playground.read("sync/inbox/bad/0-link.error").contains("s3cr3t"))
        #expect(canary.damage() == nil)
    }

    /// H1: the agent, given a FIFO for a cart, rejects it and still stops on SIGTERM.
    @Test func aFIFOCartNeitherHangsTheAgentNorKeepsItFromStopping() async throws {
        let playground = try Playground()
        let dir = playground.path
        _ = try basketSync(["-C", dir, "init"])
        let agent = try AgentProcess(directory: dir)
        try await agent.waitUntilWatching()
        #expect(mkfifo(dir + "/fifo", 0o644) == 0)
        try FileManager.default.moveItem(atPath: dir + "/fifo", toPath: dir + "/cart.json")
        try await eventually("the agent rejects the FIFO") { agent.log.contains("cart.json:1:1: is a FIFO") }
        #expect(agent.stop(SIGTERM) == 0)
    }
}

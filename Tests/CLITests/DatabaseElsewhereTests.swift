import Foundation
import Testing

/// `"database": DIR` (docs/spec.md §10): the state on a local disk while the sync directory stays
/// on a share. Every command, the agent and `wait` use the database there; the agent's lock stays
/// in the sync directory's `.basket-sync/`, so two agents are refused wherever their databases are.
@Suite struct DatabaseElsewhereTests {
    /// A sync directory whose configuration puts the database in a directory of its own beside
    /// the playground (made by `init`), and that directory.
    func directoryWithItsDatabaseElsewhere() throws -> (playground: Playground, database: String) {
        let playground = try Playground()
        let database = playground.root.deletingLastPathComponent().appendingPathComponent("db-\(UUID().uuidString)").path
        try playground.write("basket-sync.json", "{\"database\": \"\(database)\"}")
        let made = try basketSync(["-C", playground.path, "init"])
        #expect(made.status == 0, "\(made.stderr)")
        #expect(made.stdout.contains("\(database)/state.db"), "init says where the database is: \(made.stdout)")
        return (playground, database)
    }

    @Test func everyCommandTheAgentAndWaitUseTheDatabaseElsewhere() async throws {
        let (playground, database) = try directoryWithItsDatabaseElsewhere()
        defer { try? FileManager.default.removeItem(atPath: database) }
        #expect(FileManager.default.fileExists(atPath: database + "/state.db"))
        #expect(!FileManager.default.fileExists(atPath: playground.path + "/.basket-sync/state.db"), "nothing of the database on the share")
        var info = stat()
        #expect(lstat(database, &info) == 0 && info.st_mode & 0o777 == 0o700, "basket-sync's alone")

        // wait, with no agent: woken by the commit of a one-shot command, whose signal is beside
        // the database.
        let waitOutput = playground.path + "/../wait-\(UUID().uuidString).out"
        defer { try? FileManager.default.removeItem(atPath: waitOutput) }
        let waiting = try startedInBackground(["-C", playground.path, "wait", "--timeout", "600"], output: waitOutput)
        defer { if waiting.isRunning { kill(waiting.processIdentifier, SIGKILL); waiting.waitUntilExit() } }
        try await eventually("wait is asleep") { sleepsInPoll(waiting) }
        #expect(try basketSync(["-C", playground.path, "push", "--id", "e1", "A=+1"]).status == 0)
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        try await eventually("wait lists the record", timeout: 120) { !waiting.isRunning }
        #expect(waiting.terminationStatus == 0)
        #expect(((try? String(contentsOfFile: waitOutput, encoding: .utf8)) ?? "").contains("\"seq\":1"))

        // The agent: it serves the directory from there, and a second one is refused by the lock
        // in the sync directory's own .basket-sync/.
        let agent = try AgentProcess(directory: playground.path)
        try await agent.waitUntilWatching()
        #expect(!agent.log.contains("WARNING") && !agent.log.contains("network or userspace"), "\(agent.log)")
        #expect(try basketSync(["-C", playground.path, "push", "--id", "e2", "B=+2"]).status == 0)
        try await eventually("the agent takes the event") { playground.records("outbox.jsonl").count == 2 }
        #expect(FileManager.default.fileExists(atPath: playground.path + "/.basket-sync/agent.lock"), "the agent's lock is on the share")
        let second = try basketSync(["-C", playground.path, "watch"], killAfter: 60)
        #expect(second?.status == 75 && second?.stderr.contains("already watching") == true, "\(second?.stderr ?? "hung")")

        let status = try basketSync(["-C", playground.path, "status", "--json"])
        let report = try JSONSerialization.jsonObject(with: Data(status.stdout.utf8)) as? [String: Any]
        let place = report?["database"] as? [String: Any]
        #expect(place?["path"] as? String == database + "/state.db" && place?["warning"] is NSNull, "\(status.stdout.prefix(400))")
        #expect(agent.stop() == 0)
    }

    /// The database's directory is basket-sync's, as `.basket-sync/` is: open to others, a link,
    /// or a file, it is refused before SQLite opens anything.
    @Test(arguments: ["open to others", "a link", "a file"])
    func aDatabaseDirectoryThatIsNotBasketSyncsOwnIsRefused(shape: String) throws {
        let (playground, database) = try directoryWithItsDatabaseElsewhere()
        defer { try? FileManager.default.removeItem(atPath: database); try? FileManager.default.removeItem(atPath: database + ".real") }
        switch shape {
        case "open to others":
            #expect(chmod(database, 0o777) == 0)
        case "a link":
            try FileManager.default.moveItem(atPath: database, toPath: database + ".real")
            try FileManager.default.createSymbolicLink(atPath: database, withDestinationPath: database + ".real")
        default:
            try FileManager.default.removeItem(atPath: database)
            try Data("not a directory\n".utf8).write(to: URL(fileURLWithPath: database))
        }
        for command in ["sync", "status"] {
            let refused = try basketSync(["-C", playground.path, command])
            #expect(refused.status == 74, "\(shape) \(command): \(refused.status) \(refused.stderr)")
            #expect(refused.stderr.contains(database), "the message names the directory: \(refused.stderr)")
            #expect(!refused.stderr.contains("in the sync directory"), "the advice is the setting's, not the sync directory's: \(refused.stderr)")
        }
    }

    /// The directory `"database"` names, missing (the setting changed, the directory removed,
    /// under the commands or under the agent): said with that path and the setting, never as a
    /// directory to init again (which would make a second database).
    @Test func aMissingDatabaseDirectoryIsNamedWithTheSetting() async throws {
        let (playground, database) = try directoryWithItsDatabaseElsewhere()
        defer { try? FileManager.default.removeItem(atPath: database) }
        try playground.writeAtomically("cart.json", cartJSON([("A", 1)]))
        let elsewhere = database + "-moved"
        defer { try? FileManager.default.removeItem(atPath: elsewhere) }
        try playground.write("basket-sync.json", "{\"database\": \"\(elsewhere)\"}")
        for command in ["sync", "status", "wait", "apply"] {
            let missing = try basketSync(["-C", playground.path, command] + (command == "wait" ? ["--timeout", "0"] : []))
            #expect(missing.status == 66, "\(command): \(missing.status) \(missing.stderr)")
            #expect(missing.stderr.contains(elsewhere) && missing.stderr.contains("\"database\""), "\(command): \(missing.stderr)")
            #expect(!missing.stderr.contains("run basket-sync init") && !missing.stderr.contains("no .basket-sync"), "\(command): \(missing.stderr)")
        }
        try playground.write("basket-sync.json", "{\"database\": \"\(database)\"}")
        let agent = try AgentProcess(directory: playground.path)
        try await agent.waitUntilWatching()
        try FileManager.default.removeItem(atPath: database)
        #expect(try basketSync(["-C", playground.path, "push", "--id", "e1", "A=+1"]).status == 0)
        try await eventually("the agent stops") { !agent.process.isRunning }
        #expect(agent.process.terminationStatus == 74, "\(agent.log)")
        #expect(agent.log.contains(database + "/state.db") && !agent.log.contains("sync directory or its .basket-sync/"), "\(agent.log)")
    }

    /// Two sync directories naming the same database directory (a setting copied): the second is
    /// refused before it reads or writes anything of it, and the first goes on; the first's id,
    /// lost from its .basket-sync/ and written back, binds it again.
    @Test func aDatabaseServesOneSyncDirectory() throws {
        let (first, database) = try directoryWithItsDatabaseElsewhere()
        defer { try? FileManager.default.removeItem(atPath: database) }
        let second = try Playground()
        try second.write("basket-sync.json", "{\"database\": \"\(database)\"}")
        let refused = try basketSync(["-C", second.path, "init"])
        #expect(refused.status == 74 && refused.stderr.contains("serves another sync directory"), "\(refused.stderr)")
        #expect(try basketSync(["-C", second.path, "push", "--id", "e1", "A=+1"]).status != 0, "nothing delivered into a directory init refused")
        #expect(try basketSync(["-C", second.path, "sync"]).status == 74)
        #expect(second.records("outbox.jsonl").isEmpty)
        #expect(try basketSync(["-C", first.path, "push", "--id", "e1", "B=+1"]).status == 0)
        #expect(try basketSync(["-C", first.path, "sync"]).status == 0)
        #expect(first.records("outbox.jsonl").first?["seq"] as? Int == 1, "the first directory's records start at 1, its own")
        // Its id lost: refused, with the way back; written back: served again.
        let id = first.read(".basket-sync/database-id")
        try FileManager.default.removeItem(atPath: first.path + "/.basket-sync/database-id")
        let lost = try basketSync(["-C", first.path, "sync"])
        #expect(lost.status == 74 && lost.stderr.contains("write \(id.trimmingCharacters(in: .whitespacesAndNewlines)) into it"), "\(lost.stderr)")
        try first.write(".basket-sync/database-id", id)
        #expect(try basketSync(["-C", first.path, "sync"]).status == 0)
    }

    /// A copy of a sync directory (`cp -a`, a template for a new shop) carries its
    /// `.basket-sync/database-id`: the database elsewhere is bound to the `.basket-sync/` it was
    /// made with, so the copy is refused (74) before anything of it is read or written, and the
    /// original goes on. The directory restored (its `.basket-sync/` made again with the id) is
    /// refused too, until `init --rebind` binds the database to it (a plain `init` never does).
    @Test func aCopyOfTheDirectoryIsNotServedByItsDatabase() throws {
        let (first, database) = try directoryWithItsDatabaseElsewhere()
        defer { try? FileManager.default.removeItem(atPath: database) }
        try first.write("cart.json", cartJSON([("A", 1)], syncedThrough: 0))
        #expect(try basketSync(["-C", first.path, "sync"]).status == 0)
        let copy = first.root.deletingLastPathComponent().appendingPathComponent("copy-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: copy) }
        let copied = try Child.run(URL(fileURLWithPath: "/bin/cp"), arguments: ["-a", first.path, copy])
        copied.waitUntilExit()
        #expect(try basketSync(["-C", copy, "push", "--id", "only-for-the-copy", "B=+5"]).status == 0)
        for command in ["sync", "status", "wait"] {
            let refused = try basketSync(["-C", copy, command] + (command == "wait" ? ["--timeout", "0"] : []))
            #expect(refused.status == 74 && refused.stderr.contains("a copy of that directory"), "\(command): \(refused.status) \(refused.stderr)")
        }
        // A plain init on the copy (a template provisioned) takes nothing over.
        #expect(try basketSync(["-C", copy, "init"]).status == 74)
        #expect(try basketSync(["-C", first.path, "sync"]).status == 0)
        let listed = try basketSync(["-C", first.path, "wait", "--after", "0", "--timeout", "0"])
        #expect(!listed.stdout.contains("only-for-the-copy"), "the copy's event never reaches the first directory's host: \(listed.stdout)")

        // Restored: .basket-sync/ made again, its id written back — bound again by init alone.
        let id = first.read(".basket-sync/database-id")
        // Moved aside first: the new folder cannot reuse the old one's inode.
        try FileManager.default.moveItem(atPath: first.path + "/.basket-sync", toPath: first.path + "/.basket-sync.old")
        #expect(mkdir(first.path + "/.basket-sync", 0o700) == 0)
        try FileManager.default.removeItem(atPath: first.path + "/.basket-sync.old")
        try first.write(".basket-sync/database-id", id)
        let restored = try basketSync(["-C", first.path, "sync"])
        #expect(restored.status == 74 && restored.stderr.contains("init --rebind"), "\(restored.stderr)")
        #expect(try basketSync(["-C", first.path, "init"]).status == 74, "init alone binds nothing")
        #expect(try basketSync(["-C", first.path, "init", "--rebind"]).status == 0)
        #expect(try basketSync(["-C", first.path, "sync"]).status == 0)
    }

    /// A link among the directory's parents (a root-owned /var/lib/x → /data/x): followed to the
    /// real path, and everything works there.
    @Test func aLinkAmongTheParentsIsFollowedToTheRealPath() async throws {
        let playground = try Playground()
        let base = playground.root.deletingLastPathComponent().appendingPathComponent("base-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: base) }
        #expect(mkdir(base, 0o755) == 0 && mkdir(base + "/real", 0o755) == 0)
        try FileManager.default.createSymbolicLink(atPath: base + "/link", withDestinationPath: base + "/real")
        try playground.write("basket-sync.json", "{\"database\": \"\(base)/link/shop\"}")
        let made = try basketSync(["-C", playground.path, "init"])
        #expect(made.status == 0, "\(made.stderr)")
        #expect(FileManager.default.fileExists(atPath: base + "/real/shop/state.db"))
        #expect(try basketSync(["-C", playground.path, "push", "--id", "e1", "A=+1"]).status == 0)
        let synced = try basketSync(["-C", playground.path, "sync"])
        #expect(synced.status == 0 && playground.records("outbox.jsonl").count == 1, "\(synced.stderr)")
    }

    @Test(arguments: ["\"relative/db\"", "\"/var/lib/../tmp/db\"", "\"\"", "3"])
    func aDatabaseSettingThatIsNotAnAbsoluteDirectoryIsAConfigurationError(value: String) throws {
        let playground = try Playground()
        try playground.write("basket-sync.json", "{\n  \"database\": \(value)\n}")
        let refused = try basketSync(["-C", playground.path, "init"])
        #expect(refused.status == 78, "\(value): \(refused.stderr)")
        #expect(refused.stderr.contains("basket-sync.json:2:"), "the place is named: \(refused.stderr)")
        #expect(!FileManager.default.fileExists(atPath: playground.path + "/.basket-sync"), "nothing made")
        // Set so after init, the database moved where it names: `status` and `metrics` say the
        // setting (78, its place), as every command does — not a database gone.
        try playground.write("basket-sync.json", "{}")
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        try FileManager.default.removeItem(atPath: playground.path + "/.basket-sync/state.db")
        try playground.write("basket-sync.json", "{\n  \"database\": \(value)\n}")
        for command in ["status", "metrics", "sync"] {
            let broken = try basketSync(["-C", playground.path, command])
            #expect(broken.status == 78 && broken.stderr.contains("basket-sync.json:2:"), "\(value) \(command): \(broken.status) \(broken.stderr)")
        }
    }

    /// The running agent's database cannot move under it: a SIGHUP with another "database" is
    /// refused, the settings in force kept.
    @Test func aReloadCannotMoveTheDatabase() async throws {
        let (playground, database) = try directoryWithItsDatabaseElsewhere()
        defer { try? FileManager.default.removeItem(atPath: database) }
        let agent = try AgentProcess(directory: playground.path)
        try await agent.waitUntilWatching()
        try playground.write("basket-sync.json", "{\n  \"database\": null\n}")
        kill(agent.process.processIdentifier, SIGHUP)
        try await eventually("the reload is refused") { agent.log.contains("\"database\" changed") }
        #expect(agent.log.contains("basket-sync.json:2:15: \"database\" changed"), "the setting's place is named: \(agent.log)")
        try playground.write("basket-sync.json", "{\"database\": \"\(database)\"}")
        #expect(try basketSync(["-C", playground.path, "push", "--id", "e1", "A=+1"]).status == 0)
        try await eventually("the agent goes on with its database") { playground.records("outbox.jsonl").count == 1 }
        #expect(agent.stop() == 0)
    }
}

extension DatabaseElsewhereTests {
    /// `"database"` naming a directory whose parent is missing: `init` says which parent to make
    /// (66) and makes nothing — the parent's owner and mode are the operator's to choose.
    @Test func aDatabaseWhoseParentIsMissingNamesTheParent() throws {
        let playground = try Playground()
        let parent = playground.path + "/local"
        #expect(mkdir(playground.path + "/share", 0o755) == 0)
        try playground.write("share/basket-sync.json", "{\"database\": \"\(parent)/shop1\"}")
        let made = try basketSync(["-C", playground.path + "/share", "init"])
        #expect(made.status == 66 && made.stderr.contains("its parent \(parent) does not exist; make it first"), "\(made)")
        #expect(!FileManager.default.fileExists(atPath: parent))
        #expect(mkdir(parent, 0o755) == 0)
        #expect(try basketSync(["-C", playground.path + "/share", "init"]).status == 0)
        #expect(FileManager.default.fileExists(atPath: parent + "/shop1/state.db"))
    }
}

extension DatabaseElsewhereTests {
    /// `"database"` inside the sync directory, however it is spelled (its inbox, the directory
    /// itself, through a link that leads into it) or inside a tree's root: refused (78) by every
    /// command and by `validate`, its place named, and nothing made — the database is never
    /// delivered as an event, nor taken for a cart.
    @Test(arguments: ["inbox/new", "", "shop-db", "link/inbox"])
    func aDatabaseInsideTheSyncDirectoryIsRefused(place: String) throws {
        let playground = try Playground()
        #expect(mkdir(playground.path + "/share", 0o755) == 0)
        try FileManager.default.createSymbolicLink(atPath: playground.path + "/link", withDestinationPath: playground.path + "/share")
        let database = playground.path + (place.hasPrefix("link") ? "/" : "/share/") + place
        try playground.write("share/basket-sync.json", "{\n  \"database\": \"\(database.hasSuffix("/") ? String(database.dropLast()) : database)\"\n}")
        let made = try basketSync(["-C", playground.path + "/share", "init"])
        #expect(made.status == 78 && made.stderr.contains("basket-sync.json:2:") && made.stderr.contains("\"database\" lies inside the sync directory"), "\(place): \(made)")
        #expect(!FileManager.default.fileExists(atPath: playground.path + "/share/.basket-sync"), "nothing made")
        let checked = try basketSync(["-C", playground.path + "/share", "validate", "basket-sync.json"])
        #expect(checked.status == 65 && checked.stdout.contains("basket-sync.json:2:") && checked.stdout.contains("lies inside the sync directory"), "\(place): \(checked)")
        // A tree's root: a folder in it would be taken for a cart.
        let tree = try Playground()
        try tree.write("basket-sync.json", "{\"layout\": \"tree\", \"database\": \"\(tree.path)/db\"}")
        let root = try basketSync(["-C", tree.path, "init", "--tree"])
        #expect(root.status == 78 && root.stderr.contains("lies inside the sync directory"), "\(root)")
    }

    /// The sync directory seen under another name that is no link (a bind mount of it): a
    /// database under that name lies inside the directory all the same, told by what the
    /// folders are (device and inode), not by how their paths are spelled.
    /// Another sync directory's own database (in its `.basket-sync/`) is never served: named as
    /// such, the setting is refused (78, its place); reached by another name (a bind mount), the
    /// id the database keeps of its directory refuses it (74) — even one taken before that rule
    /// (its id made the other's), once its own directory ran again. Nothing of the other's
    /// history is read or written: its host is never told the second directory's deltas.
    @Test(arguments: ["named", "through a bind mount"])
    func anotherDirectorysOwnDatabaseIsNeverServed(how: String) throws {
        let owner = try Playground()
        #expect(try basketSync(["-C", owner.path, "init"]).status == 0)
        #expect(try basketSync(["-C", owner.path, "push", "--id", "own", "A=+2"]).status == 0)
        #expect(try basketSync(["-C", owner.path, "sync"]).status == 0)
        #expect(!owner.read(".basket-sync/database-id").isEmpty, "its own database carries its id")
        var named = owner.path + "/.basket-sync"
        let view = owner.root.deletingLastPathComponent().appendingPathComponent("view-\(UUID().uuidString)").path
        if how != "named" {
            #expect(mkdir(view, 0o700) == 0)
            let mounted = try basketSync(["--bind", named, view], executable: "/usr/bin/mount")
            try #require(mounted.status == 0, "a bind mount can be made here (root): \(mounted.stderr)")
            named = view
        }
        defer { if how != "named" { _ = try? basketSync([view], executable: "/usr/bin/umount"); rmdir(view) } }
        let other = try Playground()
        try other.write("basket-sync.json", "{\n  \"database\": \"\(named)\"\n}")
        let expected: Int32 = how == "named" ? 78 : 74
        for command in [["init"], ["sync"], ["status"], ["push", "--id", "theirs", "B=+5"]] {
            let refused = try basketSync(["-C", other.path] + command)
            #expect(refused.status == expected || (command[0] == "push" && refused.status != 0), "\(how) \(command): \(refused.status) \(refused.stderr)")
            if how == "named", command[0] != "push" { #expect(refused.stderr.contains("basket-sync.json:2:"), "the place is named: \(refused.stderr)") }
        }
        let theirs = try basketSync(["-C", other.path, "sync"])
        #expect(theirs.status != 0, "\(theirs.stdout)")
        #expect(owner.records("outbox.jsonl").map { $0["source"] as? String } == ["own"], "the owner's history alone")
        #expect(try basketSync(["-C", owner.path, "sync"]).status == 0)
        guard how != "named" else { return }
        #expect(theirs.stderr.contains("serves another sync directory"), "\(theirs.stderr)")
        // Taken before this rule: the database's id made the other directory's. Its own
        // directory running again makes it its own, and the other is refused from then on.
        #expect(mkdir(other.path + "/.basket-sync", 0o700) == 0 || errno == EEXIST)
        try other.write(".basket-sync/database-id", "taken-before\n")
        #expect(owner.setKeptValue("note.servesDirectory", "taken-before"))
        #expect(try basketSync(["-C", other.path, "init"]).status == 0, "taken before: served")
        #expect(try basketSync(["-C", owner.path, "sync"]).status == 0)
        let after = try basketSync(["-C", other.path, "sync"])
        #expect(after.status == 74 && after.stderr.contains("serves another sync directory"), "\(after.stderr)")
    }

    @Test func aDatabaseUnderABindMountOfTheDirectoryIsRefused() throws {
        let playground = try Playground()
        for folder in ["share", "view"] { #expect(mkdir(playground.path + "/" + folder, 0o755) == 0) }
        let mounted = try basketSync(["--bind", playground.path + "/share", playground.path + "/view"], executable: "/usr/bin/mount")
        try #require(mounted.status == 0, "a bind mount can be made here (root): \(mounted.stderr)")
        defer { _ = try? basketSync([playground.path + "/view"], executable: "/usr/bin/umount") }
        try playground.write("share/basket-sync.json", "{\n  \"database\": \"\(playground.path)/view/db\"\n}")
        let made = try basketSync(["-C", playground.path + "/share", "init"])
        #expect(made.status == 78 && made.stderr.contains("basket-sync.json:2:") && made.stderr.contains("\"database\" lies inside the sync directory"), "\(made)")
        #expect(!FileManager.default.fileExists(atPath: playground.path + "/share/db"), "nothing made")
    }
}

extension DatabaseElsewhereTests {
    /// `"database"` changed under a running agent: the agent goes on with the database it
    /// started with, and `init --adopt` — which the other commands, finding no database at the
    /// new place, advise — refuses (75) to make a second one beside it (a second history: the
    /// same seqs again, a delta applied by neither); nothing is made at the new place. Once the
    /// agent is stopped, it may.
    @Test func noSecondDatabaseIsMadeBesideARunningAgent() async throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        let agent = try AgentProcess(directory: playground.path)
        try await agent.waitUntilWatching()
        #expect(try basketSync(["-C", playground.path, "push", "A=+1"]).status == 0)
        try await eventually("the event is taken") { playground.records("outbox.jsonl").count == 1 }
        let elsewhere = playground.root.deletingLastPathComponent().appendingPathComponent("db-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: elsewhere) }
        try playground.write("basket-sync.json", "{\"database\": \"\(elsewhere)\"}")
        kill(agent.process.processIdentifier, SIGHUP)
        let apply = try basketSync(["-C", playground.path, "apply"])
        #expect(apply.status == 66 && apply.stderr.contains("was changed under it") && !apply.stderr.contains("init --adopt"), "the cause, not a lost database: \(apply.stderr)")
        for arguments in [["init", "--adopt"], ["init"]] {
            let refused = try basketSync(["-C", playground.path] + arguments)
            #expect(refused.status == 75 && refused.stderr.contains("an agent (pid \(agent.process.processIdentifier)) serves it"), "\(arguments): \(refused.status) \(refused.stderr)")
        }
        #expect(!FileManager.default.fileExists(atPath: elsewhere + "/state.db"), "nothing made at the new place")
        #expect(agent.stop() == 0)
        let adopted = try basketSync(["-C", playground.path, "init", "--adopt"])
        #expect(adopted.status == 0 && FileManager.default.fileExists(atPath: elsewhere + "/state.db"), "\(adopted.stdout) \(adopted.stderr)")
    }
}

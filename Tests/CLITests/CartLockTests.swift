import Foundation
import Testing

/// docs/spec.md §4, "The host's cart lock": `apply` holds `cart.json.lock` from its read to its
/// rename and renames only over the cart it read; `basket-sync lock -- CMD` runs a host's own
/// edit under the same lock, so a shopper's edit and `apply` never lose each other's write.
@Suite struct CartLockTests {
    /// A sync directory whose cart holds X and whose outbox holds record 1 {A:+2}, not applied.
    func directoryWithARecordToApply() throws -> Playground {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        try playground.write("cart.json", cartJSON([("X", 1)], syncedThrough: 0))
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        #expect(try basketSync(["-C", playground.path, "push", "A=+2"]).status == 0)
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        return playground
    }

    /// The cart's lines, by SKU.
    func lines(_ playground: Playground) throws -> [String: Int] {
        let cart = try JSONSerialization.jsonObject(with: Data(playground.read("cart.json").utf8)) as! [String: Any]
        var lines: [String: Int] = [:]
        for line in cart["products"] as! [[String: Any]] { lines[line["id"] as! String] = line["quantity"] as? Int }
        return lines
    }

    /// A shopper's edit as a host makes it: reads the cart, says so (`read`), waits for `go`,
    /// then writes it back with Y:2 added (temp file and rename).
    func shopperEdit(_ playground: Playground) -> [String] {
        let script = """
            import json, os, sys, time
            cart = json.load(open("cart.json"))
            open(sys.argv[1], "w").close()
            for _ in range(60000):
                if os.path.exists(sys.argv[2]): break
                time.sleep(0.01)
            cart["products"].append({"id": "Y", "quantity": 2})
            open("cart.json.tmp", "w").write(json.dumps(cart))
            os.rename("cart.json.tmp", "cart.json")
            """
        return ["/usr/bin/env", "python3", "-c", script, playground.path + "/read", playground.path + "/go"]
    }

    /// A host that wraps its read–modify–write in `basket-sync lock`: `apply`, started while the
    /// edit holds the lock, waits for it, then applies its records to the edited cart.
    @Test func applyWaitsForAnEditHoldingTheLock() async throws {
        let playground = try directoryWithARecordToApply()
        let go = playground.path + "/go"
        defer { _ = FileManager.default.createFile(atPath: go, contents: nil) }
        let edit = try startedInBackground(["-C", playground.path, "lock", "--"] + shopperEdit(playground), errors: playground.path + "/edit.err")
        try await eventually("the edit read the cart under the lock") { FileManager.default.fileExists(atPath: playground.path + "/read") }
        // A timeout far beyond the test's own deadlines: the test waits on conditions, never on time.
        let apply = try startedInBackground(["-C", playground.path, "apply", "--timeout", "600"], errors: playground.path + "/apply.err")
        try await eventually("apply waits for the lock (its stderr: \(playground.read("apply.err")))") {
            playground.read("apply.err").contains("waiting for the host's cart lock, held by process") || !apply.isRunning
        }
        #expect(apply.isRunning, "apply did not wait: \(playground.read("apply.err"))")
        _ = FileManager.default.createFile(atPath: go, contents: nil)
        edit.waitUntilExit()
        apply.waitUntilExit()
        #expect(edit.terminationStatus == 0, "\(playground.read("edit.err"))")
        #expect(apply.terminationStatus == 0, "\(playground.read("apply.err"))")
        #expect(try lines(playground) == ["X": 1, "Y": 2, "A": 2], "the shopper's Y and Mealz's A both kept: \(playground.read("cart.json"))")
    }

    /// A host that writes without the lock between apply's read and its rename (held there by
    /// the test seam): apply sees the cart is no longer the one it read, reads it again and
    /// applies its records to it — the shopper's edit is kept.
    @Test func aCartWrittenWhileApplyRunsIsReadAgain() async throws {
        let playground = try directoryWithARecordToApply()
        let go = playground.path + "/go"
        defer { _ = FileManager.default.createFile(atPath: go, contents: nil) }
        let apply = try startedInBackground(["-C", playground.path, "apply", "--json"], output: playground.path + "/apply.out", errors: playground.path + "/apply.err",
                                            environment: ["LD_PRELOAD": FaultTests.shim, "FAULTSHIM_HOLD": ".cart.json.", "FAULTSHIM_GO": go])
        try await eventually("apply wrote its new cart and waits before the rename") { FileManager.default.fileExists(atPath: go + ".held") || !apply.isRunning }
        #expect(apply.isRunning, "\(playground.read("apply.err"))")
        try playground.write("cart.json", cartJSON([("X", 1), ("Y", 2)], syncedThrough: 0))
        _ = FileManager.default.createFile(atPath: go, contents: nil)
        apply.waitUntilExit()
        #expect(apply.terminationStatus == 0, "\(playground.read("apply.err"))")
        #expect(playground.read("apply.err").contains("changed while apply ran"), "\(playground.read("apply.err"))")
        #expect(try lines(playground) == ["X": 1, "Y": 2, "A": 2], "\(playground.read("cart.json"))")
        #expect(playground.read("cart.json").contains("\"syncedThrough\": 1"))
    }

    /// `lock` waits as long as it takes, or up to --timeout (75, naming the holder); runs CMD with
    /// the lock as descriptors 3 (the lock file) and 4 (the sync directory) and exits with CMD's status.
    @Test func lockRunsACommandHoldingTheLockAndTimesOut() async throws {
        let playground = try directoryWithARecordToApply()
        let go = playground.path + "/go"
        defer { _ = FileManager.default.createFile(atPath: go, contents: nil) }
        let held = try startedInBackground(["-C", playground.path, "lock", "--"] + shopperEdit(playground))
        try await eventually("the lock is held") { FileManager.default.fileExists(atPath: playground.path + "/read") }
        let late = try basketSync(["-C", playground.path, "lock", "--timeout", "0.2", "--", "true"])
        #expect(late.status == 75, "\(late)")
        // Every holder is named, in the order of their process ids: `lock` and the command it runs
        // (which holds the lock too, as descriptor 3).
        #expect(late.stderr.contains("cart.json.lock: the host's cart lock is held by process ") && late.stderr.contains("process \(held.processIdentifier)"), "\(late.stderr)")
        let apply = try basketSync(["-C", playground.path, "apply", "--timeout", "0.2"])
        #expect(apply.status == 75 && apply.stderr.contains("held by process ") && apply.stderr.contains("process \(held.processIdentifier)"), "\(apply)")
        #expect(try lines(playground) == ["X": 1], "nothing written")
        _ = FileManager.default.createFile(atPath: go, contents: nil)
        held.waitUntilExit()
        let run = try basketSync(["-C", playground.path, "lock", "--", "/bin/sh", "-c", "readlink /proc/$$/fd/3 /proc/$$/fd/4; exit 7"])
        #expect(run.status == 7, "CMD's status: \(run)")
        #expect(run.stdout.hasSuffix("/cart.json.lock\n\(playground.root.resolvingSymlinksInPath().path)\n"), "the lock file, then the sync directory: \(run.stdout)")
    }

    /// The lock file removed while a host's edit holds it (a cleanup of stale `*.lock` files):
    /// `apply` and `lock` still wait for that edit — they also hold the sync directory's lock,
    /// which no cleanup removes — and once it is over, apply keeps the edit's write.
    @Test func theLockHoldsWhenItsFileIsRemovedWhileHeld() async throws {
        let playground = try directoryWithARecordToApply()
        let go = playground.path + "/go"
        defer { _ = FileManager.default.createFile(atPath: go, contents: nil) }
        let edit = try startedInBackground(["-C", playground.path, "lock", "--"] + shopperEdit(playground), errors: playground.path + "/edit.err")
        try await eventually("the edit read the cart under the lock") { FileManager.default.fileExists(atPath: playground.path + "/read") }
        #expect(unlink(playground.path + "/cart.json.lock") == 0)
        let apply = try basketSync(["-C", playground.path, "apply", "--timeout", "0.2"])
        #expect(apply.status == 75 && apply.stderr.contains("the sync directory's lock (taken with the host's cart lock") && apply.stderr.contains("process \(edit.processIdentifier)"), "\(apply)")
        let lock = try basketSync(["-C", playground.path, "lock", "--timeout", "0.2", "--", "true"])
        #expect(lock.status == 75, "\(lock)")
        #expect(try lines(playground) == ["X": 1], "nothing written while the edit holds the lock")
        _ = FileManager.default.createFile(atPath: go, contents: nil)
        edit.waitUntilExit()
        #expect(edit.terminationStatus == 0, "\(playground.read("edit.err"))")
        let after = try basketSync(["-C", playground.path, "apply"])
        #expect(after.status == 0, "\(after)")
        #expect(try lines(playground) == ["X": 1, "Y": 2, "A": 2], "the shopper's Y and Mealz's A both kept: \(playground.read("cart.json"))")
    }

    /// What a timeout names is the lock that is held: a process holding only the sync
    /// directory's lock (one that may write the directory: this test's own account) is said as holding
    /// that, never the lock file nobody holds.
    @Test func aTimeoutNamesTheLockThatIsHeld() throws {
        let playground = try directoryWithARecordToApply()
        let folder = open(playground.path, O_RDONLY | O_DIRECTORY)
        #expect(folder >= 0 && flock(folder, LOCK_EX) == 0)
        defer { close(folder) }
        for command in [["apply", "--timeout", "0.2"], ["lock", "--timeout", "0.2", "--", "true"]] {
            let late = try basketSync(["-C", playground.path] + command)
            #expect(late.status == 75, "\(command): \(late)")
            #expect(late.stderr.contains("\(playground.path): the sync directory's lock (taken with the host's cart lock") && late.stderr.contains("held by process \(getpid())"), "\(command): \(late.stderr)")
            #expect(!late.stderr.contains("cart.json.lock"), "\(command): \(late.stderr)")
        }
        #expect(try lines(playground) == ["X": 1], "nothing written")
    }

    /// Every lock a command waits for is waited for a bounded time: a process holding `apply`'s
    /// own lock (the host's cart lock free) holds up an apply for its --timeout, then 75 naming
    /// that lock, never without end.
    @Test func anotherApplysLockIsWaitedForTheTimeoutAtMost() throws {
        let playground = try directoryWithARecordToApply()
        let held = open(playground.path + "/.basket-sync/apply.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        #expect(held >= 0 && flock(held, LOCK_EX) == 0)
        defer { close(held) }
        let apply = try #require(try basketSync(["-C", playground.path, "apply", "--timeout", "0.2"], killAfter: 60), "apply ends while another apply's lock is held")
        #expect(apply.status == 75 && apply.stderr.contains("apply.lock: another basket-sync process has held it for 200 ms"), "\(apply)")
        #expect(try lines(playground) == ["X": 1], "nothing written")
        #expect(flock(held, LOCK_UN) == 0)
        let after = try basketSync(["-C", playground.path, "apply", "--timeout", "0.2"])
        let applied = try lines(playground)
        #expect(after.status == 0 && applied == ["X": 1, "A": 2], "\(after) \(playground.read("cart.json"))")
    }

    /// A host that writes the cart without the lock, in the instant between `apply`'s last look
    /// and its rename (the rename held three seconds by strace, standing for the scheduler),
    /// loses nothing: the cart is swapped in, the file it displaced judged — not the one read, it
    /// is put back — and the records applied to it. The shopper's line and Mealz's delta both end
    /// in the cart.
    @Test func aCartWrittenInTheInstantBeforeApplysRenameIsKept() throws {
        let playground = try directoryWithARecordToApply()
        let strace = "/usr/bin/strace"
        try #require(FileManager.default.isExecutableFile(atPath: strace), "strace is installed (scripts/install-deps)")
        let log = playground.path + "/../strace-\(UUID().uuidString).log"
        defer { try? FileManager.default.removeItem(atPath: log) }
        let apply = Child()
        apply.executableURL = URL(fileURLWithPath: strace)
        apply.arguments = ["-f", "-o", log, "-e", "trace=renameat2", "-e", "inject=renameat2:delay_enter=3000000:when=1", binary.path, "-C", playground.path, "apply"]
        apply.standardOutput = FileHandle.nullDevice
        apply.standardError = FileHandle.nullDevice
        try apply.run()
        defer { if apply.isRunning { kill(apply.processIdentifier, SIGKILL) } }
        // Until apply is held in its rename (renameat2, 316 on x86-64, in /proc/PID/task/*/syscall
        // of the process strace runs) — looked for on this thread, a millisecond apart (not a
        // task the pool may hold back while the rename's three seconds pass).
        func heldInItsRename() -> Bool {
            let children = (try? String(contentsOfFile: "/proc/\(apply.processIdentifier)/task/\(apply.processIdentifier)/children", encoding: .utf8)) ?? ""
            return children.split(separator: " ").contains { child in
                ((try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(child)/task")) ?? []).contains { task in
                    ((try? String(contentsOfFile: "/proc/\(child)/task/\(task)/syscall", encoding: .utf8)) ?? "").hasPrefix("316 ")
                }
            }
        }
        let deadline = ContinuousClock.now + .seconds(120)
        while apply.isRunning, ContinuousClock.now < deadline, !heldInItsRename() { usleep(1_000) }
        try #require(apply.isRunning, "apply ended before its rename: \((try? String(contentsOfFile: log, encoding: .utf8)) ?? "")")
        // The shop's edit, the documented way (a temporary renamed over the cart), without the lock.
        try playground.writeAtomically("cart.json", cartJSON([("X", 1), ("SHOPPER", 5)], syncedThrough: 0))
        apply.waitUntilExit()
        #expect(apply.terminationStatus == 0)
        #expect(try lines(playground) == ["X": 1, "SHOPPER": 5, "A": 2], "\(playground.read("cart.json"))")
        let calls = ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").split(separator: "\n").filter { $0.contains("renameat2(") }
        #expect(calls.count >= 3, "swapped, put back, swapped again after the records were applied to the shop's cart: \(calls)")
    }

    /// The lock file is readable by its writers alone (one made open to all before is closed
    /// down), and a lock on it held only by an account that may not write the directory (it
    /// opened it while it was open to all) is not waited for. The directory's own lock is: it
    /// keeps two takers apart when the lock file is removed while held — a reader that can open
    /// the directory holds `apply` up (75, named), one that cannot (0750) does not.
    @Test(arguments: ["the lock file", "the directory", "the directory, closed to others"])
    func onlyAWriterCanHoldUpTheCartLock(held: String) throws {
        let playground = try directoryWithARecordToApply()
        chmod(playground.path, 0o755)
        let lockFile = playground.path + "/cart.json.lock"
        #expect(try basketSync(["-C", playground.path, "lock", "--", "true"]).status == 0, "the lock file made")
        var info = stat()
        #expect(stat(lockFile, &info) == 0 && info.st_mode & 0o777 == 0o600, "readable by its writer alone: \(String(info.st_mode & 0o777, radix: 8))")
        #expect(chmod(lockFile, 0o644) == 0, "as an older version made it")
        let target = held == "the lock file" ? lockFile : playground.path
        if held == "the directory, closed to others" { #expect(chmod(playground.path, 0o750) == 0) }
        let started = try Account.writer.shell("flock -x '\(target)' sleep 600 >/dev/null 2>&1 </dev/null & echo $!")
        let pid = try #require(Int32(started.stdout.trimmingCharacters(in: .whitespacesAndNewlines)), "\(started)")
        defer { kill(pid, SIGKILL) }
        // Holding it (the account reaches it), or refused at its open.
        let deadline = ContinuousClock.now + .seconds(60)
        func holds() -> Bool {
            let data = FileHandle(forReadingAtPath: "/proc/locks")?.readDataToEndOfFile() ?? Data()
            return String(decoding: data, as: UTF8.self).split(separator: "\n").contains { $0.contains("FLOCK") && $0.contains(" \(pid) ") && !$0.contains("->") }
        }
        while held != "the directory, closed to others", !holds(), ContinuousClock.now < deadline { usleep(2_000) }
        let apply = try basketSync(["-C", playground.path, "apply", "--timeout", "1"])
        if held == "the directory" {
            #expect(apply.status == 75 && apply.stderr.contains("process \(pid)") && apply.stderr.contains("0750"), "\(apply)")
        } else {
            #expect(apply.status == 0, "\(held): \(apply)")
            #expect(try lines(playground) == ["X": 1, "A": 2])
        }
        #expect(stat(lockFile, &info) == 0 && info.st_mode & 0o777 == 0o600, "closed down again")
    }

    /// A process that `lock -- CMD` left running keeps the lock (it inherited descriptor 3): a
    /// timeout names that live process, not the `lock` that took it and is gone.
    @Test func aTimeoutNamesTheLiveHolder() async throws {
        let playground = try directoryWithARecordToApply()
        let pidFile = playground.path + "/left.pid"
        let left = try basketSync(["-C", playground.path, "lock", "--", "/bin/sh", "-c", "sleep 600 >/dev/null 2>&1 & echo $! > \"$0\"", pidFile])
        #expect(left.status == 0, "\(left)")
        let pid = Int32(playground.read("left.pid").trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
        defer { kill(pid, SIGKILL) }
        let late = try basketSync(["-C", playground.path, "lock", "--timeout", "0.2", "--", "true"])
        #expect(late.status == 75 && late.stderr.contains("held by process \(pid)"), "the left process \(pid): \(late.stderr)")
    }

    /// A timeout names the process holding the lock, never one waiting for it (a host's
    /// `flock` blocked behind the holder has the file open too).
    @Test func aTimeoutNamesTheHolderNotAWaiter() async throws {
        let playground = try directoryWithARecordToApply()
        #expect(try basketSync(["-C", playground.path, "lock", "--", "true"]).status == 0, "the lock file made")
        let lockFile = playground.path + "/cart.json.lock"
        func flock(_ arguments: [String]) throws -> Process {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/flock")
            process.arguments = arguments
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
            return process
        }
        // The lines of /proc/locks, read to its end (its size says 0), split into fields.
        func locks() -> [[Substring]] {
            let data = FileHandle(forReadingAtPath: "/proc/locks")?.readDataToEndOfFile() ?? Data()
            return String(decoding: data, as: UTF8.self).split(separator: "\n").map { $0.split(separator: " ") }
        }
        let holder = try flock(["--no-fork", lockFile, "sleep", "600"])
        // SIGKILL: the test runner's children may ignore SIGTERM.
        defer { kill(holder.processIdentifier, SIGKILL); holder.waitUntilExit() }
        try await eventually("the holder holds it") { locks().contains { $0.count >= 6 && $0[1] == "FLOCK" && $0[4] == "\(holder.processIdentifier)" } }
        let waiter = try flock([lockFile, "true"])
        defer { kill(waiter.processIdentifier, SIGKILL); waiter.waitUntilExit() }
        try await eventually("the waiter waits", timeout: 60) {
            try #require(waiter.isRunning, "the waiter got the lock: the holder does not hold it")
            return locks().contains { $0.count >= 7 && $0[1] == "->" && $0[2] == "FLOCK" && $0[5] == "\(waiter.processIdentifier)" }
        }
        let late = try basketSync(["-C", playground.path, "lock", "--timeout", "0.2", "--", "true"])
        #expect(late.status == 75 && late.stderr.contains("process \(holder.processIdentifier)") && !late.stderr.contains("process \(waiter.processIdentifier)"), "holder \(holder.processIdentifier), waiter \(waiter.processIdentifier): \(late.stderr)")
    }

    /// The lock file is a regular file made by basket-sync: a link, a FIFO or a folder in its
    /// place is refused (73) and never followed; the lock of a tree is one cart's.
    /// A folder that is not a sync directory is refused (66), as by every command: no lock
    /// file is made there, no command run (a host with a wrong -C would edit under a lock apply
    /// never takes).
    @Test func lockOutsideASyncDirectoryIsRefused() throws {
        let playground = try Playground()
        let refused = try basketSync(["-C", playground.path, "lock", "--", "touch", playground.path + "/ran"])
        #expect(refused.status == 66 && refused.stderr.contains("not a sync directory"), "\(refused.status) \(refused.stderr)")
        #expect(!FileManager.default.fileExists(atPath: playground.path + "/cart.json.lock") && !FileManager.default.fileExists(atPath: playground.path + "/ran"))
    }

    @Test func theLockFileIsARegularFileOrRefused() throws {
        let playground = try directoryWithARecordToApply()
        let lock = playground.path + "/cart.json.lock"
        let target = playground.path + "/elsewhere"
        try playground.write("elsewhere", "keep\n")
        for shape in ["link", "fifo", "folder"] {
            try? FileManager.default.removeItem(atPath: lock)
            switch shape {
            case "link": try FileManager.default.createSymbolicLink(atPath: lock, withDestinationPath: target)
            case "fifo": #expect(mkfifo(lock, 0o644) == 0)
            default: try FileManager.default.createDirectory(atPath: lock, withIntermediateDirectories: false)
            }
            for arguments in [["lock", "--", "true"], ["apply"]] {
                let run = try basketSync(["-C", playground.path] + arguments)
                #expect(run.status == 73, "\(shape), \(arguments[0]): \(run)")
                #expect(run.stderr.contains("cart.json.lock") && run.stderr.contains("remove it"), "\(run.stderr)")
            }
        }
        #expect(playground.read("elsewhere") == "keep\n")
        #expect(try lines(playground) == ["X": 1])
        let tree = try Playground()
        #expect(try basketSync(["-C", tree.path, "init", "--tree"]).status == 0)
        #expect(try basketSync(["-C", tree.path, "lock", "--", "true"]).status == 64)
    }

    /// With `followSymlinks` and the cart in a folder reached through a link (`host` → a folder
    /// elsewhere), the lock is made beside the cart, in the folder the link leads to — never in
    /// the folder that holds that one — and `apply` and `lock` exclude each other there.
    @Test func theLockOfACartBehindAFolderLinkIsBesideTheCart() throws {
        let playground = try Playground()
        let sync = playground.path + "/sync"
        #expect(try basketSync(["-C", sync, "init"]).status == 0)
        try playground.write("sync/basket-sync.json", #"{"followSymlinks": true, "cart": "host/cart.json"}"#)
        #expect(mkdir(playground.path + "/elsewhere", 0o755) == 0 && mkdir(playground.path + "/elsewhere/real", 0o755) == 0)
        try FileManager.default.createSymbolicLink(atPath: sync + "/host", withDestinationPath: playground.path + "/elsewhere/real")
        try playground.write("elsewhere/real/cart.json", cartJSON([("X", 1)], syncedThrough: 0))
        #expect(try basketSync(["-C", sync, "sync"]).status == 0)
        #expect(try basketSync(["-C", sync, "push", "A=+1"]).status == 0)
        let apply = try basketSync(["-C", sync, "apply"])
        #expect(apply.status == 0, "\(apply)")
        #expect(FileManager.default.fileExists(atPath: playground.path + "/elsewhere/real/cart.json.lock"), "the lock beside the cart")
        #expect(!FileManager.default.fileExists(atPath: playground.path + "/elsewhere/cart.json.lock"), "nothing made in the folder above")
        let held = try basketSync(["-C", sync, "lock", "--", "/bin/sh", "-c", "readlink /proc/$$/fd/3"])
        #expect(held.status == 0 && held.stdout.hasSuffix("/elsewhere/real/cart.json.lock\n"), "\(held)")
    }
}

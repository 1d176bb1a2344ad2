import CSQLite
import Foundation
import Testing

/// An account of this machine, by number (no entry in /etc/passwd is needed): the agent's, or a
/// writer's — another member of the directory's group.
struct Account {
    var uid: UInt32
    var gid: UInt32

    static let group: UInt32 = 4311
    static let agent = Account(uid: 4211, gid: group)
    static let writer = Account(uid: 4212, gid: group)

    private func started(_ arguments: [String]) throws -> Run {
        let process = Child()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
        process.arguments = ["--reuid=\(uid)", "--regid=\(gid)", "--clear-groups", "--"] + arguments
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        process.standardInput = FileHandle.nullDevice
        try process.run()
        // A hang is a failure, not a stuck test: killed after a generous deadline.
        let deadline = Date().addingTimeInterval(60)
        while process.isRunning, Date() < deadline { usleep(2_000) }
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
        let stdout = out.fileHandleForReading.readDataToEndOfFile()
        let stderr = err.fileHandleForReading.readDataToEndOfFile()
        return Run(status: process.terminationStatus, stdout: String(decoding: stdout, as: UTF8.self), stderr: String(decoding: stderr, as: UTF8.self))
    }

    /// `basket-sync` run as this account.
    func basketSync(_ arguments: [String]) throws -> Run { try started([binary.path] + arguments) }

    /// A shell command run as this account.
    func shell(_ script: String) throws -> Run { try started(["/bin/sh", "-c", script]) }
}

/// Who basket-sync trusts with what (docs/spec.md §7): its configuration and its database are
/// used only when owned by the account it runs as (or root) and writable by nobody else, in a
/// directory others may write only with the sticky bit; names from the database are never paths.
/// Two real accounts: the agent's, and a writer in the directory's group.
@Suite struct TrustTests {
    /// `PLAYGROUND/shop`, made by the agent's account as a sync directory; the playground open
    /// to both accounts, and `home/secret`, a file only the agent's account may read.
    func shop(_ playground: Playground) throws -> String {
        chmod(playground.path, 0o755)
        let home = playground.path + "/home"
        #expect(mkdir(home, 0o700) == 0 && chown(home, Account.agent.uid, Account.agent.gid) == 0)
        try playground.write("home/secret", "s3cr3t of the agent's account\n")
        #expect(chown(home + "/secret", Account.agent.uid, Account.agent.gid) == 0 && chmod(home + "/secret", 0o600) == 0)
        let shop = playground.path + "/shop"
        #expect(mkdir(shop, 0o755) == 0 && chown(shop, Account.agent.uid, Account.group) == 0)
        let made = try Account.agent.basketSync(["-C", shop, "init"])
        #expect(made.status == 0, "\(made.stderr)")
        return shop
    }

    /// The writer renames a configuration of hers over the agent's (`followSymlinks`) and links
    /// the cart to a file only the agent's account may read: every command the agent's account
    /// runs refuses (78) naming the file's owner, reads nothing through the link, writes nothing.
    /// Refused by the directory (group-writable without the sticky bit), then, with the sticky
    /// bit put back, by the file's owner.
    @Test func anotherAccountsConfigurationIsNeverUsed() throws {
        let playground = try Playground()
        let shop = try shop(playground)
        #expect(chmod(shop, 0o2775) == 0)  // an operator's mistake: group-writable, no sticky bit
        let swap = try Account.writer.shell("cd \(shop) && printf '{\"followSymlinks\": true}' > .mine && mv -f .mine basket-sync.json && ln -sf ../home/secret cart.json")
        #expect(swap.status == 0, "the writer may rename in a directory without the sticky bit: \(swap.stderr)")
        for (mode, why) in [(UInt32(0o2775), "without the sticky bit"), (0o3775, "owned by uid \(Account.writer.uid)")] {
            #expect(chmod(shop, mode_t(mode)) == 0)
            for command in [["sync"], ["apply"], ["wait", "--timeout", "0"], ["push", "A=+1"], ["push", "--state", "A=1"], ["watch"]] {
                let run = try Account.agent.basketSync(["-C", shop] + command)
                let context = "mode \(String(mode, radix: 8)), \(command.joined(separator: " ")): exit \(run.status): \(run.stderr)"
                if command == ["push", "A=+1"] {
                    // push takes the defaults of a configuration it may not use: a delivery is never refused.
                    #expect(run.status == 0, "\(context)")
                } else if command.first == "push" {
                    // A state needs its basket, which neither the database nor a notification tells here.
                    #expect(run.status == 73 && run.stderr.contains(why) && run.stderr.contains("give --basket N"), "\(context)")
                } else {
                    #expect(run.status == 78 && run.stderr.contains(why), "\(context)")
                }
                #expect(!run.stdout.contains("s3cr3t") && !run.stderr.contains("s3cr3t"), "\(context): the secret leaked")
            }
        }
        #expect(playground.read("home/secret") == "s3cr3t of the agent's account\n")
        #expect(!playground.read("shop/notifications.jsonl").contains("s3cr3t"))
    }

    /// The writer swaps `.basket-sync/` for a database she made with `init`, holding a filed
    /// inbox file named `../../../victim/precious`, and retention is on: the agent's account never
    /// opens it (74, naming its owner) and the file outside, which she could not remove, stays.
    @Test func anotherAccountsDatabaseIsNeverOpened() throws {
        let playground = try Playground()
        let shop = try shop(playground)
        let victim = playground.path + "/victim"
        #expect(mkdir(victim, 0o755) == 0 && chown(victim, Account.agent.uid, Account.agent.gid) == 0)
        try playground.write("victim/precious", "kept\n")
        #expect(chown(victim + "/precious", Account.agent.uid, Account.agent.gid) == 0)
        try playground.write("shop/basket-sync.json", "{\"retention\": {\"days\": 0.00001}}")
        #expect(chown(shop + "/basket-sync.json", Account.agent.uid, Account.agent.gid) == 0)
        // Her database, made by her, with the row.
        let evil = playground.path + "/evil"
        #expect(mkdir(evil, 0o755) == 0 && chown(evil, Account.writer.uid, Account.writer.gid) == 0)
        #expect(try Account.writer.basketSync(["-C", evil, "init"]).status == 0)
        try forgeFiled(evil + "/.basket-sync/state.db", name: "../../../victim/precious")
        #expect(try Account.writer.shell("rm -f \(victim)/precious").status != 0, "she cannot remove it herself")
        #expect(chmod(shop, 0o2775) == 0)
        let swap = try Account.writer.shell("cd \(shop) && mv .basket-sync .old && mv \(evil)/.basket-sync .basket-sync")
        #expect(swap.status == 0, "\(swap.stderr)")
        #expect(chmod(shop, 0o3775) == 0)
        for command in [["sync"], ["status"], ["apply"], ["watch"]] {
            let run = try Account.agent.basketSync(["-C", shop] + command)
            #expect(run.status == 74 && run.stderr.contains("owned by uid \(Account.writer.uid)"), "\(command): exit \(run.status): \(run.stderr)")
        }
        #expect(playground.read("victim/precious") == "kept\n")
    }

    /// Names read from basket-sync's own database are never paths: a filed inbox file named
    /// `../../victim` (a database restored from elsewhere, or edited) is not removed by retention;
    /// the database is the agent's own, so only the rule stands between them.
    @Test func namesFromTheDatabaseAreNeverPaths() throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path + "/shop", "init"]).status == 0)
        try playground.write("victim", "kept\n")
        try playground.write("shop/basket-sync.json", "{\"retention\": {\"days\": 0.00001}}")
        try forgeFiled(playground.path + "/shop/.basket-sync/state.db", name: "../../victim")
        #expect(try basketSync(["-C", playground.path + "/shop", "push", "A=+1"]).status == 0)
        let sync = try basketSync(["-C", playground.path + "/shop", "sync"])
        #expect(sync.status == 0, "\(sync.stderr)")
        #expect(playground.read("victim") == "kept\n")
    }

    /// basket-sync's own files writable by others, or in a directory others may write without the
    /// sticky bit, are refused with the chmod that mends them; mended, the command works.
    @Test func ownFilesOthersMayWriteAreRefusedWithTheFix() throws {
        let playground = try Playground()
        let shop = playground.path + "/shop"
        #expect(try basketSync(["-C", shop, "init"]).status == 0)
        let cases: [(path: String, mode: UInt32, code: Int32, fix: String)] = [
            (shop + "/basket-sync.json", 0o664, 78, "chmod go-w \(shop)/basket-sync.json"),
            (shop + "/.basket-sync", 0o770, 74, "chmod go-w \(shop)/.basket-sync"),
            (shop + "/.basket-sync/state.db", 0o666, 74, "chmod go-w \(shop)/.basket-sync/state.db"),
            (shop, 0o777, 78, "chmod +t \(shop)"),
        ]
        for (path, mode, code, fix) in cases {
            var info = stat()
            #expect(stat(path, &info) == 0)
            #expect(chmod(path, mode_t(mode)) == 0)
            let run = try basketSync(["-C", shop, "sync"])
            #expect(run.status == code && run.stderr.contains(fix), "\(path) \(String(mode, radix: 8)): exit \(run.status): \(run.stderr)")
            #expect(chmod(path, info.st_mode & 0o7777) == 0)
            #expect(try basketSync(["-C", shop, "sync"]).status == 0, "mended: \(path)")
        }
        // The sticky bit makes a group-writable directory safe.
        #expect(chmod(shop, 0o1777) == 0)
        #expect(try basketSync(["-C", shop, "sync"]).status == 0)
    }

    /// `init --shared GROUP` whose group is no such group, or one this account may not give its
    /// files to (not a member): a usage error (64) before anything is made.
    @Test(arguments: ["basket-sync-no-such-group", "0", "99999"])
    func aSharedInitWithAGroupItCannotUseMakesNothing(group: String) throws {
        let playground = try Playground()
        chmod(playground.path, 0o755)
        let shop = playground.path + "/shop"
        #expect(mkdir(shop, 0o755) == 0 && chown(shop, Account.agent.uid, Account.group) == 0)
        let refused = try Account.agent.basketSync(["-C", shop, "init", "--shared", group])
        #expect(refused.status == 64 && refused.stderr.contains("--shared \(group)"), "\(refused.status) \(refused.stderr)")
        #expect(((try? FileManager.default.contentsOfDirectory(atPath: shop)) ?? ["?"]).isEmpty, "nothing made")
    }

    /// `init --shared GROUP`: the writer, a member of the group, delivers (`push`, or a file into
    /// inbox/new/) and writes the cart; she can rename over neither the configuration nor the
    /// database, nor remove the outputs; an output file she makes first is never appended to.
    @Test func aSharedDirectoryLetsTheGroupWriteOnlyWhatIsTheirs() throws {
        let playground = try Playground()
        chmod(playground.path, 0o755)
        let shop = playground.path + "/shop"
        #expect(mkdir(shop, 0o755) == 0 && chown(shop, Account.agent.uid, Account.group) == 0)
        let made = try Account.agent.basketSync(["-C", shop, "init", "--shared", String(Account.group)])
        #expect(made.status == 0, "\(made.stderr)")
        var info = stat()
        #expect(stat(shop, &info) == 0 && info.st_mode & 0o7777 == 0o3770 && info.st_gid == Account.group)
        #expect(stat(shop + "/inbox/new", &info) == 0 && info.st_mode & 0o7777 == 0o3770)
        #expect(stat(shop + "/.basket-sync", &info) == 0 && info.st_mode & 0o7777 == 0o700 && info.st_uid == Account.agent.uid)
        #expect(stat(shop + "/basket-sync.json", &info) == 0 && info.st_mode & 0o022 == 0)

        // An output file she makes before the agent's first record: refused, never appended to.
        #expect(try Account.writer.shell("touch \(shop)/outbox.jsonl && chmod 666 \(shop)/outbox.jsonl").status == 0)
        #expect(try Account.writer.basketSync(["-C", shop, "push", "A=+1"]).status == 0)
        let refused = try Account.agent.basketSync(["-C", shop, "sync"])
        #expect(refused.status == 73 && refused.stderr.contains("outbox.jsonl") && refused.stderr.contains("owned by uid \(Account.writer.uid)"), "\(refused.stderr)")
        #expect(try Account.writer.shell("rm \(shop)/outbox.jsonl").status == 0)

        let cart = try Account.writer.shell("cd \(shop) && printf '{\"products\":[{\"id\":\"A\",\"quantity\":1}],\"syncedThrough\":1}' > .c && mv .c cart.json")
        #expect(cart.status == 0, "\(cart.stderr)")
        let sync = try Account.agent.basketSync(["-C", shop, "sync"])
        #expect(sync.status == 0, "\(sync.stderr)")
        #expect(playground.records("shop/outbox.jsonl").map(products) == [["A": 1]])
        for attack in ["printf '{}' > \(shop)/.x && mv -f \(shop)/.x \(shop)/basket-sync.json",
                       "mv \(shop)/.basket-sync \(shop)/.old",
                       "rm -f \(shop)/outbox.jsonl"] {
            let run = try Account.writer.shell(attack)
            #expect(run.status != 0, "the sticky bit refuses it: \(attack)")
        }
        #expect(try Account.agent.basketSync(["-C", shop, "sync"]).status == 0)
    }

    /// A file named on the command line that lies in the sync directory (`--products FILE`,
    /// `validate FILE`) is read as basket-sync reads a file there: a link the writer planted
    /// under that name, to a file only the agent's account may read, is refused, never read
    /// — its lines never reach `payments.jsonl`, which the group reads; nor through her link to a
    /// folder named on the way out (`x/../FILE`). The same file named from outside the directory
    /// is the user's own, its link followed.
    @Test func aFileNamedOnTheCommandLineInTheDirectoryIsNeverReadThroughAnotherAccountsLink() throws {
        let (playground, shop) = try sharedShop()
        chmod(playground.path, 0o755)
        let home = playground.path + "/home"
        #expect(mkdir(home, 0o700) == 0 && chown(home, Account.agent.uid, Account.agent.gid) == 0)
        try playground.write("home/bought.json", #"{"products":[{"id":"SECRET-SKU","quantity":7}]}"#)
        #expect(chown(home + "/bought.json", Account.agent.uid, Account.agent.gid) == 0 && chmod(home + "/bought.json", 0o600) == 0)
        #expect(try Account.agent.basketSync(["-C", shop, "set-store", "s1", "--mode", "retailer"]).status == 0)
        #expect(try Account.writer.shell("ln -s \(home)/bought.json \(shop)/products.json").status == 0)
        for arguments in [["payment-started", "--total", "1.00", "--products", "products.json"],
                          ["handle-payment", "--total", "1.00", "--order-id", "o1", "--products", "products.json"],
                          ["payment-started", "--total", "1.00", "--products", shop + "/products.json"]] {
            let run = try Account.agent.basketSync(["-C", shop] + arguments)
            // payment-started never fails (best-effort): it records the payment as skipped.
            #expect(run.status == (arguments[0] == "payment-started" ? 0 : 65) && run.stderr.contains("products.json:1:1: is a symbolic link"), "\(arguments): \(run.status) \(run.stderr)")
        }
        let validated = try Account.agent.basketSync(["-C", shop, "validate", "products.json"])
        #expect(validated.status != 0 && !validated.stdout.contains("SECRET") && !validated.stderr.contains("SECRET"), "\(validated)")
        // Her link to a folder beside the file, named on the way (`x/../bought.json`): the kernel
        // would leave the directory through it; a link is followed only to what its owner owns.
        #expect(mkdir(home + "/inner", 0o700) == 0 && chown(home + "/inner", Account.agent.uid, Account.agent.gid) == 0)
        #expect(try Account.writer.shell("ln -s \(home)/inner \(shop)/x").status == 0)
        for arguments in [["handle-payment", "--total", "1.00", "--order-id", "o2", "--products", "x/../bought.json"],
                          ["handle-payment", "--total", "1.00", "--order-id", "o3", "--products", shop + "/x/../bought.json"],
                          ["validate", "x/../bought.json"]] {
            let run = try Account.agent.basketSync(["-C", shop] + arguments)
            #expect(run.status == 65 && (run.stderr + run.stdout).contains("/x (uid \(Account.writer.uid)) leads to a folder of uid \(Account.agent.uid): a link is followed only to what its own owner owns")
                    && !(run.stdout + run.stderr).contains("SECRET"), "\(arguments): \(run.status) \(run.stdout) \(run.stderr)")
        }
        #expect(!playground.read("shop/payments.jsonl").contains("SECRET-SKU"), "the agent's private file was copied where the group reads")
        // Named from outside the directory, the same link is the user's own: followed.
        #expect(try Account.agent.shell("ln -s \(home)/bought.json \(home)/mine.json").status == 0)
        let own = try Account.agent.basketSync(["-C", shop, "payment-started", "--total", "1.00", "--products", home + "/mine.json"])
        #expect(own.status == 0 && playground.read("shop/payments.jsonl").contains("SECRET-SKU"), "\(own.stderr)")
    }

    /// A file named outside the directory is walked from descriptors, never by its whole name
    /// again: the writer swaps her folder `m` for a link while the command is held (the LD_PRELOAD
    /// seam) between its walk of `shop/m/../../sec/own.json` and the file's open — the file read is
    /// the one the path named (the agent's own), never the private one the link would lead to.
    @Test func aFolderSwappedForALinkWhileANamedPathIsWalkedIsNeverWalkedThrough() throws {
        let (playground, shop) = try sharedShop()
        let top = playground.path
        for folder in ["sec", "sec/sub", "sec/sub/y", "sec/sec", "held"] {
            #expect(mkdir(top + "/" + folder, 0o755) == 0 && chown(top + "/" + folder, Account.agent.uid, Account.agent.gid) == 0)
        }
        #expect(chmod(top + "/sec/sec", 0o700) == 0)
        try playground.write("sec/own.json", #"{"products":[{"id":"MINE","quantity":1}]}"#)
        try playground.write("sec/sec/own.json", #"{"products":[{"id":"PRIVATE","quantity":1}]}"#)
        for file in ["sec/own.json", "sec/sec/own.json"] { #expect(chown(top + "/" + file, Account.agent.uid, Account.agent.gid) == 0) }
        #expect(chmod(top + "/sec/sec/own.json", 0o600) == 0)
        #expect(try Account.agent.basketSync(["-C", shop, "set-store", "s1", "--mode", "retailer"]).status == 0)
        #expect(try Account.writer.shell("mkdir \(shop)/m").status == 0)
        let go = top + "/held/go"
        final class Outcome: @unchecked Sendable { var run: Run?; var done = false }
        let outcome = Outcome()
        let thread = Thread {
            outcome.run = try? Account.agent.shell("LD_PRELOAD=\(FaultTests.shim) FAULTSHIM_HOLD_OPEN=own.json FAULTSHIM_GO=\(go) \(binary.path) -C \(shop) payment-started --total 1 --products \(shop)/m/../../sec/own.json")
            outcome.done = true
        }
        thread.start()
        let deadline = ContinuousClock.now + .seconds(60)
        while !FileManager.default.fileExists(atPath: go + ".held"), !outcome.done, ContinuousClock.now < deadline { usleep(2_000) }
        #expect(FileManager.default.fileExists(atPath: go + ".held"), "the command reached the file's open: \(String(describing: outcome.run))")
        #expect(try Account.writer.shell("mv \(shop)/m \(shop)/md && ln -s \(top)/sec/sub/y \(shop)/m").status == 0)
        #expect(FileManager.default.createFile(atPath: go, contents: nil))
        while !outcome.done, ContinuousClock.now < deadline { usleep(2_000) }
        #expect(outcome.run?.status == 0, "\(String(describing: outcome.run))")
        let payments = playground.read("shop/payments.jsonl")
        #expect(payments.contains("MINE") && !payments.contains("PRIVATE"), "the file the path named, not the link's: \(payments)")
    }

    /// A sync directory `shop` the agent's account made with `init --shared` for the writer's group.
    func sharedShop() throws -> (Playground, String) {
        let playground = try Playground()
        chmod(playground.path, 0o755)
        let shop = playground.path + "/shop"
        #expect(mkdir(shop, 0o755) == 0 && chown(shop, Account.agent.uid, Account.group) == 0)
        #expect(try Account.agent.basketSync(["-C", shop, "init", "--shared", String(Account.group)]).status == 0)
        return (playground, shop)
    }

    /// The Mealz side's account, in a shared directory, may not read the database: `push --state`
    /// takes the basket from the last notification (closing a basket writes one at once), so a
    /// state pushed before a payment is stale after it — ignored, never diffed against the new
    /// basket (which pushed the paid units again). When nothing tells the basket (the
    /// notifications consumed), the state is refused, naming `--basket N`; given, it is delivered.
    @Test func aStatePushedByTheGroupCarriesTheBasketTheNotificationsTell() throws {
        let (playground, shop) = try sharedShop()
        defer { withExtendedLifetime(playground) {} }
        #expect(try Account.writer.shell("cd \(shop) && printf '{\"products\":[],\"syncedThrough\":0}' > .c && mv .c cart.json").status == 0)
        for step in [["set-store", "s1", "--mode", "retailer"], ["push", "A=+4"], ["sync"], ["apply"], ["sync"]] {
            let run = try Account.agent.basketSync(["-C", shop] + step)
            #expect(run.status == 0, "\(step): \(run.stderr)")
        }
        let pushed = try Account.writer.basketSync(["-C", shop, "push", "--state", "--id", "st1", "A=4"])
        #expect(pushed.status == 0, "\(pushed.stderr)")
        let delivered = playground.names("shop/inbox/new").map { playground.read("shop/inbox/new/\($0)") }
        #expect(delivered.count == 1 && delivered[0].contains("\"basket\":1"), "\(delivered)")
        #expect(try Account.agent.basketSync(["-C", shop, "handle-payment", "--total", "1", "--order-id", "o1"]).status == 0)
        #expect(try Account.agent.basketSync(["-C", shop, "sync"]).status == 0)
        #expect(!playground.read("shop/outbox.jsonl").contains("\"source\":\"st1\""), "the paid units pushed again: \(playground.read("shop/outbox.jsonl"))")
        let status = try JSONSerialization.jsonObject(with: Data(try Account.agent.basketSync(["-C", shop, "status", "--json"]).stdout.utf8)) as? [String: Any]
        #expect((status?["counters"] as? [String: Any])?["staleStates"] as? Int == 1, "\(String(describing: status?["counters"]))")

        // The notifications consumed by their reader: nothing tells the basket.
        #expect(try Account.agent.shell("rm \(shop)/notifications.jsonl").status == 0)
        let refused = try Account.writer.basketSync(["-C", shop, "push", "--state", "A=4"])
        #expect(refused.status == 73 && refused.stderr.contains("give --basket N"), "\(refused.status) \(refused.stderr)")
        #expect(playground.names("shop/inbox/new").isEmpty, "nothing delivered")
        #expect(try Account.writer.basketSync(["-C", shop, "push", "--state", "--basket", "2", "A=4"]).status == 0)
    }

    /// An inbox entry the agent can neither take nor set aside (a directory another member of the
    /// group made in inbox/new/: renaming a directory needs write access to it) stays in new/: its
    /// error stands in `status` (the inbox's current error, the last error current) while it is
    /// there, and is over once it is moved away.
    @Test func anInboxEntryThatCannotBeSetAsideIsACurrentErrorWhileItStays() throws {
        let (playground, shop) = try sharedShop()
        defer { withExtendedLifetime(playground) {} }  // the directory lives until the test ends
        #expect(try Account.writer.shell("mkdir \(shop)/inbox/new/stuck && chmod 755 \(shop)/inbox/new/stuck").status == 0)
        // The pass goes on past it (the entries behind are taken); the entry stays.
        _ = try Account.agent.basketSync(["-C", shop, "sync"])
        func health() throws -> (inbox: String?, current: Bool?, standing: String?) {
            let run = try Account.agent.basketSync(["-C", shop, "status", "--json"])
            let status = try JSONSerialization.jsonObject(with: Data(run.stdout.utf8)) as? [String: Any]
            let errors = (status?["health"] as? [String: Any])?["errors"] as? [String: Any]
            let last = status?["lastError"] as? [String: Any]
            return (errors?["inbox"] as? String, last?["current"] as? Bool, last?["standing"] as? String)
        }
        let stuck = try health()
        #expect(stuck.inbox?.contains("inbox/new/stuck") == true, "\(stuck)")
        #expect(stuck.current == true && stuck.standing?.contains("still in inbox/new/") == true, "\(stuck)")
        #expect(stuck.inbox?.contains("/proc/self/fd") == false, "paths named as people know them: \(stuck)")
        #expect(try Account.writer.shell("rmdir \(shop)/inbox/new/stuck").status == 0)
        let gone = try health()
        #expect(gone.inbox == nil && gone.current == false, "\(gone)")
    }

    /// Adds to the database at `path` an inbox file filed long ago under `name`, as the file's
    /// owner would (its owner and mode kept).
    func forgeFiled(_ path: String, name: String) throws {
        var before = stat()
        #expect(stat(path, &before) == 0)
        var handle: OpaquePointer?
        #expect(sqlite3_open(path, &handle) == SQLITE_OK)
        let sql = "INSERT INTO settled(cart, folder, name, at) VALUES (0, 'cur', '\(name)', '2000-01-01T00:00:00.000Z')"
        #expect(sqlite3_exec(handle, "PRAGMA journal_mode=DELETE; " + sql, nil, nil, nil) == SQLITE_OK, "\(sql)")
        sqlite3_close(handle)
        #expect(chown(path, before.st_uid, before.st_gid) == 0)
    }

    /// A file another cart's agent wrote, moved into this cart's directory at an output's name
    /// (the name free after the host moved its file away): it holds lines but none of this cart's
    /// records, so basket-sync refuses it (73) and never appends to it; moved away, the next
    /// record starts a new file — also when its records go beyond this cart's (they carry another
    /// sync id: not a database behind). The same for a file made there holding a forged record.
    @Test func aFileBasketSyncDidNotWriteHereIsNeverAppendedTo() throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init", "--tree"]).status == 0)
        // The other cart's records go beyond this one's: no "database behind" for them either.
        for (id, count) in [("evil", 4), ("victim", 1)] {
            for _ in 0..<count { #expect(try basketSync(["-C", "\(playground.path)/\(id)", "push", "\(id == "evil" ? "EVIL" : "A")=+1"]).status == 0) }
            #expect(try basketSync(["-C", "\(playground.path)/\(id)", "sync"]).status == 0)
        }
        let victim = playground.path + "/victim/outbox.jsonl"
        for planted in ["another cart's", "forged"] {
            try? FileManager.default.removeItem(atPath: victim)
            if planted == "forged" {
                try playground.write("victim/outbox.jsonl", "{\"seq\":1,\"id\":\"x-1\",\"type\":\"updateBasket\",\"at\":\"2026-01-01T00:00:00.000Z\",\"products\":[{\"id\":\"EVIL\",\"quantity\":50}]}\n")
            } else {
                try FileManager.default.moveItem(atPath: playground.path + "/evil/outbox.jsonl", toPath: victim)
            }
            #expect(try basketSync(["-C", playground.path + "/victim", "push", "B=+1"]).status == 0)
            let sync = try basketSync(["-C", playground.path + "/victim", "sync"])
            #expect(sync.status == 73 && sync.stderr.contains("victim/outbox.jsonl: holds lines but none of this directory's records"), "\(planted): \(sync.stderr)")
            #expect(playground.records("victim/outbox.jsonl").allSatisfy { products($0)["EVIL"] != nil }, "\(planted): appended to")
        }
        try FileManager.default.removeItem(atPath: victim)
        #expect(try basketSync(["-C", playground.path + "/victim", "sync"]).status == 0)
        #expect(playground.records("victim/outbox.jsonl").allSatisfy { products($0)["EVIL"] == nil && ($0["seq"] as? Int ?? 0) >= 2 })
        #expect(!playground.records("victim/outbox.jsonl").isEmpty)
    }

    /// A rotated part the writer made herself (her own file, holding record 9999) is not
    /// basket-sync's: `status` names it, not "database behind"; `sync` works; after a lost
    /// database, `init --adopt` does not adopt it — the next record is 2, not 10000.
    @Test func aRotatedPartOfAnotherAccountIsNeverTakenForRecords() throws {
        let (playground, shop) = try sharedShop()
        #expect(try Account.writer.basketSync(["-C", shop, "push", "A=+1"]).status == 0)
        #expect(try Account.agent.basketSync(["-C", shop, "sync"]).status == 0)
        let planted = try Account.writer.shell("printf '%s\\n' '{\"seq\":9999,\"id\":\"x-9999\",\"type\":\"updateBasket\",\"at\":\"2026-01-01T00:00:00.000Z\",\"products\":[{\"id\":\"EVIL\",\"quantity\":9}]}' > \(shop)/outbox.jsonl.1")
        #expect(planted.status == 0, "\(planted.stderr)")
        let status = try Account.agent.basketSync(["-C", shop, "status"])
        #expect(status.status == 0 && !status.stdout.contains("database behind") && status.stdout.contains("outbox.jsonl.1: is owned by uid \(Account.writer.uid)"), "\(status.stdout)\(status.stderr)")
        #expect(try Account.agent.basketSync(["-C", shop, "sync"]).status == 0)
        #expect(try Account.agent.shell("rm -rf \(shop)/.basket-sync").status == 0)
        let adopted = try Account.agent.basketSync(["-C", shop, "init", "--adopt"])
        #expect(adopted.status == 0, "\(adopted.stderr)")
        #expect(try Account.writer.basketSync(["-C", shop, "push", "B=+1"]).status == 0)
        #expect(try Account.agent.basketSync(["-C", shop, "sync"]).status == 0)
        #expect(playground.records("shop/outbox.jsonl").compactMap { $0["seq"] as? Int } == [1, 2])
    }
}

extension TrustTests {
    /// In a tree set up with `init --tree --shared`, the Mealz side's account (a member of the
    /// group, not the tree's) delivers with `push` into a cart the agent's account made, and into
    /// one that does not exist yet (it makes the folder and its delivery folders, open to the
    /// group): the tree's `sync` takes both events, adopting the new cart.
    @Test func theMealzSidePushesIntoASharedTree() throws {
        let playground = try Playground()
        defer { withExtendedLifetime(playground) {} }
        chmod(playground.path, 0o755)
        let root = playground.path + "/tree"
        #expect(mkdir(root, 0o755) == 0 && chown(root, Account.agent.uid, Account.group) == 0)
        let made = try Account.agent.basketSync(["-C", root, "init", "--tree", "--shared", String(Account.group)])
        #expect(made.status == 0, "\(made.stderr)")
        #expect(try Account.agent.basketSync(["-C", root + "/c1", "init"]).status == 0)
        for id in ["c1", "c2"] {
            let push = try Account.writer.basketSync(["-C", root + "/" + id, "push", "--id", "m-\(id)", "A=+1"])
            #expect(push.status == 0, "\(id): \(push.status) \(push.stderr)")
        }
        let sync = try Account.agent.basketSync(["-C", root, "sync"])
        #expect(sync.status == 0 && sync.stdout.contains("2 carts: ") && sync.stdout.contains("inbox: 2 taken"), "\(sync.stdout) \(sync.stderr)")
        for id in ["c1", "c2"] {
            #expect(playground.read("tree/\(id)/outbox.jsonl").contains("\"m-\(id)\""), "\(id): the Mealz side's event is taken")
            #expect(playground.names("tree/\(id)/inbox/new").isEmpty && playground.names("tree/\(id)/inbox/cur").count == 1, "\(id): filed, not left in new/")
        }
        // A bad delivery into the cart the Mealz side made is set aside in bad/, the agent's.
        #expect(try Account.writer.shell("umask 007; printf '{not json' > \(root)/c2/inbox/tmp/x && mv \(root)/c2/inbox/tmp/x \(root)/c2/inbox/new/x").status == 0)
        let again = try Account.agent.basketSync(["-C", root, "sync"])
        #expect(again.stdout.contains("1 bad") && playground.names("tree/c2/inbox/new").isEmpty, "\(again.stdout) \(again.stderr)")
        // Its state for either cart — the one it made too — carries the basket the cart's last
        // notification tells (the agent's file: the tree's root's account owns it).
        for id in ["c1", "c2"] {
            #expect(try Account.writer.shell("cd \(root)/\(id) && printf '{\"products\":[{\"id\":\"A\",\"quantity\":1}],\"syncedThrough\":1}' > .c && mv .c cart.json").status == 0)
        }
        #expect(try Account.agent.basketSync(["-C", root, "sync"]).status == 0)
        for id in ["c1", "c2"] {
            let state = try Account.writer.basketSync(["-C", root + "/" + id, "push", "--state", "--id", "s-\(id)", "A=1"])
            #expect(state.status == 0, "\(id): \(state.status) \(state.stderr)")
            let delivered = playground.names("tree/\(id)/inbox/new").map { playground.read("tree/\(id)/inbox/new/\($0)") }
            #expect(delivered.count == 1 && delivered[0].contains("\"basket\":1"), "\(id): \(delivered)")
        }
    }
}

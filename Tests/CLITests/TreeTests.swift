import CSQLite
import Foundation
import Testing
import TestSupport

/// A tree of carts (docs/spec.md §8) with real directories, real inotify and the built binary:
/// carts taken on however they appear, a bad cart stopping only itself, a cart removed and made
/// again starting over, one agent per tree, and the crash test over many carts.
@Suite(.serialized) struct TreeTests: TreeSuite {}

/// What the tree suites share (two of them, each serialized — one agent at a time each — so that
/// the slowest tree tests, which wait out locks held by another process, run beside the rest).
protocol TreeSuite {}

extension TreeSuite {
    /// A tree at the playground's root.
    func tree() throws -> Playground {
        let playground = try Playground()
        let made = try basketSync(["-C", playground.path, "init", "--tree"])
        #expect(made.status == 0, "\(made.stderr)")
        return playground
    }

    func mkdir(_ playground: Playground, _ relative: String) throws {
        try FileManager.default.createDirectory(at: playground.url(relative), withIntermediateDirectories: true)
    }

    /// A Mealz line A in cart `id`: a push, then the host's cart echoing it.
    func mealzLine(_ playground: Playground, _ id: String, quantity: Int = 1) throws {
        #expect(try basketSync(["-C", "\(playground.path)/\(id)", "push", "A=+\(quantity)"]).status == 0)
    }

    /// Cart directories c001… (`count` of them), each with an event A+1 waiting in its inbox
    /// (id "ID-1") and `cart` as its cart; their ids.
    func cartsWithAnEvent(_ playground: Playground, count: Int, cart: String) throws -> [String] {
        let ids = (1...count).map { String(format: "c%03d", $0) }
        for id in ids {
            try mkdir(playground, "\(id)/inbox/tmp")
            try mkdir(playground, "\(id)/inbox/new")
            try playground.write("\(id)/inbox/new/1764633600.M1P1Q1.test", "{\"id\":\"\(id)-1\",\"type\":\"basketDelta\",\"products\":[{\"id\":\"A\",\"quantity\":1}]}")
            try playground.write("\(id)/cart.json", cart)
        }
        return ids
    }

    func notified(_ playground: Playground, _ id: String) -> [[String: Any]] {
        playground.records("\(id)/notifications.jsonl")
    }
}

extension TreeTests {
    @Test func cartsAreAdoptedWhetherMadeBeforeTheAgentWhileItRunsOrByPush() async throws {
        let playground = try tree()
        // Made while no agent ran: the host's directory and cart.
        try mkdir(playground, "before")
        try playground.writeAtomically("before/cart.json", cartJSON([("X", 1)]))
        let agent = try AgentProcess(directory: playground.path)
        try await agent.waitUntilWatching()
        try await eventually("the cart made before the start is notified") { notified(playground, "before").count == 1 }
        #expect(agent.log.contains("the tree has 1 carts"), "\(agent.log)")

        // Made while it runs, by the host: mkdir, then the cart.
        try mkdir(playground, "while")
        try playground.writeAtomically("while/cart.json", cartJSON([("X", 2)]))
        try await eventually("the cart made while running is notified") { notified(playground, "while").count == 1 }
        #expect(FileManager.default.fileExists(atPath: playground.url("while/inbox/new").path), "its inbox is made")

        // Made by the Mealz side: push makes the directory; the agent takes the event.
        try mealzLine(playground, "by-push", quantity: 2)
        try await eventually("the pushed event reaches the new cart's outbox") { playground.records("by-push/outbox.jsonl").count == 1 }
        try playground.writeAtomically("by-push/cart.json", cartJSON([("A", 2)], syncedThrough: 1))
        try await eventually("the echo is notified") { notified(playground, "by-push").last.map(products) == ["A": 2] }

        // Each cart is its own synchronization: its own seqs and sync id.
        let ids = ["before", "while", "by-push"].map { playground.read("\($0)/.basket-sync-cart") }
        #expect(Set(ids).count == 3, "three sync ids: \(ids)")
        #expect(playground.records("by-push/outbox.jsonl").first?["seq"] as? Int == 1)

        // status on the root sums up every cart; --json gives each one's report.
        let status = try basketSync(["-C", playground.path, "status"])
        #expect(status.status == 0 && status.stdout.contains("3 carts") && status.stdout.contains("carts with an error: none"), "\(status.stdout)\(status.stderr)")
        let json = try basketSync(["-C", playground.path, "status", "--json"])
        let report = try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any]
        let carts = (report?["carts"] as? [[String: Any]])?.compactMap { $0["cart"] as? String }
        #expect(carts == ["before", "by-push", "while"], "\(json.stdout)")
        #expect((report?["records"] as? [String: Any])?["outbox"] as? Int == 1)
        #expect(agent.stop() == 0)
    }

    /// A cart that is a FIFO, one that does not parse and one the agent may not read (it runs as
    /// nobody): each is reported, and every other cart goes on being served.
    @Test func aBadCartStopsOnlyItself() async throws {
        let playground = try tree()
        for id in ["fifo", "garbled", "unreadable"] { try mkdir(playground, id) }
        // Mealz-related lines, so that each cart change is a notification.
        for id in ["good-1", "good-2"] { try mealzLine(playground, id) }
        #expect(mkfifo(playground.url("fifo/cart.json").path, 0o644) == 0)
        try playground.write("garbled/cart.json", "{\"products\": [")
        try playground.write("unreadable/cart.json", cartJSON([("X", 1)]))
        #expect(chown(playground.path, 65534, 65534) == 0)
        for entry in FileManager.default.enumerator(atPath: playground.path)!.compactMap({ $0 as? String }) {
            #expect(lchown(playground.url(entry).path, 65534, 65534) == 0)
        }
        // Root's, mode 000: nobody cannot read it.
        #expect(chown(playground.url("unreadable/cart.json").path, 0, 0) == 0)
        #expect(chmod(playground.url("unreadable/cart.json").path, 0) == 0)

        let agent = try AgentProcess(directory: playground.path, user: 65534)
        try await agent.waitUntilWatching()
        for round in 1...2 {
            for id in ["good-1", "good-2"] {
                try playground.writeAtomically("\(id)/cart.json", cartJSON([("A", round)], syncedThrough: 1))
                #expect(chown(playground.url("\(id)/cart.json").path, 65534, 65534) == 0)
            }
            try await eventually("the good carts are notified (round \(round))") {
                notified(playground, "good-1").count == round && notified(playground, "good-2").count == round
            }
        }
        #expect(agent.process.isRunning)
        for id in ["fifo", "garbled", "unreadable"] {
            #expect(notified(playground, id).isEmpty, "\(id) gave no notification")
        }
        // As the agent's account: the tree's configuration and database are its own, not root's.
        // The garbled cart is rejected once it has stayed as it is (half a second).
        var status = Run(status: -1, stdout: "", stderr: "")
        try await eventually("the three bad carts are said") {
            status = try #require(try basketSync(["-C", playground.path, "status"], killAfter: 60, user: 65534))
            return status.stdout.contains("carts with an error: 3")
        }
        for (id, why) in [("fifo", "FIFO"), ("garbled", "garbled/cart.json:1:"), ("unreadable", "Permission denied")] {
            #expect(status.stdout.contains("  \(id): ") && agent.log.contains(why), "\(id): \(status.stdout)\n\(agent.log)")
            // The same errors in the cart's health and the metrics: one rule says what holds now.
            let own = try #require(try basketSync(["-C", "\(playground.path)/\(id)", "status", "--json"], killAfter: 60, user: 65534))
            let report = try JSONSerialization.jsonObject(with: Data(own.stdout.utf8)) as? [String: Any]
            let errors = (report?["health"] as? [String: Any])?["errors"] as? [String: Any]
            #expect(errors?["cart"] as? String != nil, "\(id): \(own.stdout)")
        }
        let metrics = try #require(try basketSync(["-C", playground.path, "metrics"], killAfter: 60, user: 65534)).stdout
        #expect(metrics.contains("state=\"with_errors\"} 3\n") && metrics.contains("basket_sync_errors{directory=\"\(playground.path)\"} 3\n"), "\(metrics)")
        #expect(agent.stop() == 0)
    }

    /// A cart directory the agent cannot write when it first sees it (made by another account
    /// with its umask) is reported and tried again alone with a growing delay: once its owner is
    /// fixed it is taken on and served, with no restart and nothing else done.
    @Test func aCartThatCouldNotBeTakenOnForAPermissionIsTriedAgain() async throws {
        let playground = try tree()
        #expect(chown(playground.path, 65534, 65534) == 0)
        for entry in FileManager.default.enumerator(atPath: playground.path)!.compactMap({ $0 as? String }) {
            #expect(lchown(playground.url(entry).path, 65534, 65534) == 0)
        }
        let agent = try AgentProcess(directory: playground.path, user: 65534)
        try await agent.waitUntilWatching()
        // Root's, mode 0755: the agent's account cannot make the cart's folders or marker in it.
        try mkdir(playground, "c1")
        try playground.write("c1/cart.json", cartJSON([("X", 1)]))
        try await eventually("the failure is said with its retry") { agent.log.contains("cart c1: ") && agent.log.contains("retrying in 1.0 s") }
        #expect(!FileManager.default.fileExists(atPath: playground.path + "/c1/.basket-sync-cart"))
        #expect(chown(playground.path + "/c1", 65534, 65534) == 0 && chown(playground.path + "/c1/cart.json", 65534, 65534) == 0)
        try await eventually("the cart is taken on once it can be", timeout: 90) { FileManager.default.fileExists(atPath: playground.path + "/c1/.basket-sync-cart") }
        let pushed = try #require(try basketSync(["-C", playground.path + "/c1", "push", "A=+1"], killAfter: 60, user: 65534))
        #expect(pushed.status == 0, "\(pushed)")
        try await eventually("the cart is served") { playground.records("c1/outbox.jsonl").count == 1 }
        #expect(agent.stop() == 0)
    }

    /// A cart whose directory leaves the tree and comes back as it was (its marker with it) is
    /// served again with its state: its numbering, its pending batch and Mealz's share go on —
    /// moved out and back under the agent, and while the agent was down. Away longer than its
    /// time (an hour; two seconds here), the cart ends: put back, it is refused as holding
    /// records, and `init --adopt` goes on after them.
    @Test(arguments: [false, true])
    func aCartPutBackAsItWasIsServedAgain(whileDown: Bool) async throws {
        let playground = try tree()
        let away = playground.root.deletingLastPathComponent().appendingPathComponent("away-\(UUID().uuidString)").path
        try mkdir(playground, "c1")
        try playground.write("c1/cart.json", cartJSON([("X", 1)], syncedThrough: 0))
        #expect(try basketSync(["-C", playground.path + "/c1", "push", "A=+1"]).status == 0)
        var agent = try AgentProcess(directory: playground.path)
        try await agent.waitUntilWatching()
        try await eventually("the batch is pending") { playground.records("c1/outbox.jsonl").count == 1 }
        if whileDown { #expect(agent.stop() == 0) }
        #expect(rename(playground.path + "/c1", away) == 0)
        if !whileDown { try await eventually("the agent stops serving it") { agent.log.contains("cart c1: its directory left the tree: not served") } }
        if whileDown {
            // A pass while it is away (cron's sync on the root) does not end it either.
            let pass = try basketSync(["-C", playground.path, "sync"])
            #expect(pass.status == 0 && !pass.stdout.contains("ended") && !pass.stderr.contains("ended"), "\(pass)")
        }
        #expect(rename(away, playground.path + "/c1") == 0)
        let putBack = Date()
        if whileDown {
            agent = try AgentProcess(directory: playground.path)
            try await agent.waitUntilWatching()
        }
        // The host echoes the pending batch: settled as an echo, and the next record is #2.
        try playground.writeAtomically("c1/cart.json", cartJSON([("X", 1), ("A", 1)], syncedThrough: 1))
        #expect(try basketSync(["-C", playground.path + "/c1", "push", "A=+2"]).status == 0)
        try await eventually("the cart is served with its state") { playground.records("c1/outbox.jsonl").count == 2 }
        #expect(playground.records("c1/outbox.jsonl").map { $0["seq"] as? Int } == [1, 2])
        // The echo is taken in its own time (polled, it may come after the push's event).
        var status = Run(status: -1, stdout: "", stderr: "")
        var counters: [String: Int]?
        try await eventually("the batch made before it left settles") {
            status = try basketSync(["-C", playground.path + "/c1", "status", "--json"])
            counters = (try JSONSerialization.jsonObject(with: Data(status.stdout.utf8)) as? [String: Any])?["counters"] as? [String: Int]
            return counters?["settled"] == 1 || (counters?["rolledBack"] ?? 0) > 0
        }
        #expect(counters?["settled"] == 1 && counters?["rolledBack"] == 0, "the batch made before it left settled: \(status.stdout)")
        #expect(agent.stop() == 0)

        // Away longer than its time: ended, and refused when it comes back. Its time counts from
        // this leaving, not from the one before (more than its time ago by then).
        let brief = try AgentProcess(directory: playground.path, environment: ["BASKET_SYNC_AWAY_SECONDS": "2"])
        try await brief.waitUntilWatching()
        try await eventually("the first time away is more than the time ago") { Date().timeIntervalSince(putBack) > 2.5 }
        #expect(rename(playground.path + "/c1", away) == 0)
        try await eventually("the cart ends once away long enough") { brief.log.contains("cart c1: its directory left the tree more than 2 s ago: the cart ended") }
        // Away from its leaving, not from an earlier time away (put back, that one was forgotten).
        #expect(brief.log.contains("cart c1: its directory left the tree: not served"), "\(brief.log)")
        #expect(rename(away, playground.path + "/c1") == 0)
        try await eventually("put back after it ended, it is refused") { brief.log.contains("c1: holds records") && brief.log.contains("away from the tree longer than 2 s") }
        #expect(brief.stop() == 0)
        #expect(try basketSync(["-C", playground.path + "/c1", "init", "--adopt"]).status == 0)
        #expect(try basketSync(["-C", playground.path + "/c1", "push", "A=+1"]).status == 0)
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        #expect(playground.records("c1/outbox.jsonl").map { $0["seq"] as? Int } == [1, 2, 3], "adopted, it goes on after its records")
    }

    /// A command on a cart whose directory left the tree says so — kept a while to be put back —
    /// rather than advising `init`, which would make a new cart under its id and end it; a
    /// `push` meanwhile, which would do the same, is refused for now (75).
    @Test func aCommandOnACartThatLeftTheTreeSaysItCanBePutBack() throws {
        let playground = try tree()
        try mkdir(playground, "c1")
        try playground.writeAtomically("c1/cart.json", cartJSON([("X", 1)], syncedThrough: 0))
        #expect(try basketSync(["-C", playground.path + "/c1", "push", "A=+2"]).status == 0)
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        let away = try Playground()
        #expect(rename(playground.path + "/c1", away.path + "/c1") == 0)
        for marked in [false, true] {
            if marked { #expect(try basketSync(["-C", playground.path, "sync"]).status == 0) }
            for command in [["apply"], ["status"], ["wait", "--timeout", "0"]] {
                let run = try basketSync(["-C", playground.path + "/c1"] + command)
                #expect(run.status == 66 && run.stderr.contains("cart c1's directory left the tree") && run.stderr.contains("put the directory back")
                        && run.stderr.contains(marked ? "kept for " : "from when basket-sync sees it gone"), "\(command), \(marked): \(run.status) \(run.stderr)")
            }
        }
        // A delivery meanwhile would make a new cart under the id and end this one: refused for
        // now (75), nothing made.
        let push = try basketSync(["-C", playground.path + "/c1", "push", "A=+1"])
        #expect(push.status == 75 && push.stderr.contains("left the tree") && push.stderr.contains("push again once the directory is back"), "\(push.status) \(push.stderr)")
        #expect(!FileManager.default.fileExists(atPath: playground.path + "/c1"))
        #expect(rename(away.path + "/c1", playground.path + "/c1") == 0)
        #expect(try basketSync(["-C", playground.path + "/c1", "push", "A=+1"]).status == 0, "put back, it takes deliveries")
        let applied = try basketSync(["-C", playground.path + "/c1", "apply"])
        #expect(applied.status == 0 && playground.read("c1/cart.json").contains("\"A\""), "put back, served with its state: \(applied.stdout) \(applied.stderr)")
    }

    /// Two carts' folders swapped (each with its marker): a delivery to one id is refused (73)
    /// as every command refuses it — never dropped into the folder that holds the other cart,
    /// whose shopper would get it once the folders are put back.
    @Test func aDeliveryIsRefusedIntoAFolderHoldingAnotherCartsMarker() throws {
        let playground = try tree()
        for id in ["c1", "c2"] {
            try mkdir(playground, id)
            try playground.writeAtomically("\(id)/cart.json", cartJSON([], syncedThrough: 0))
            #expect(try basketSync(["-C", playground.path + "/" + id, "push", "--id", "first-\(id)", "A=+1"]).status == 0)
        }
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        func swap() {
            #expect(rename(playground.path + "/c1", playground.path + "/swapping") == 0)
            #expect(rename(playground.path + "/c2", playground.path + "/c1") == 0)
            #expect(rename(playground.path + "/swapping", playground.path + "/c2") == 0)
        }
        swap()
        for id in ["c1", "c2"] {
            let push = try basketSync(["-C", playground.path + "/" + id, "push", "--id", "for-\(id)", "X=+5"])
            #expect(push.status == 73 && push.stderr.contains("holds the marker of cart \"\(id == "c1" ? "c2" : "c1")\"") && push.stderr.contains("Put the folders back"), "\(id): \(push.status) \(push.stderr)")
        }
        // The tree still counts both carts, each with its error.
        let report = try JSONSerialization.jsonObject(with: Data(try basketSync(["-C", playground.path, "status", "--json"]).stdout.utf8)) as? [String: Any]
        #expect(report?["cartCount"] as? Int == 2 && (report?["withErrors"] as? [Any])?.count == 2, "\(report ?? [:])")
        #expect(try basketSync(["-C", playground.path, "status"]).stdout.contains("tree \(playground.path): 2 carts"))
        // Every command says it so — lock and init --adopt too, which would guard or make the
        // other shopper's cart this one's — and none advises init --adopt.
        for command in [["sync"], ["apply"], ["status"], ["wait", "--timeout", "0"], ["lock", "--", "/bin/true"], ["init", "--adopt"]] {
            let run = try basketSync(["-C", playground.path + "/c1"] + command)
            #expect(run.status == 73 && run.stderr.contains("holds the marker of cart \"c2\"") && !run.stderr.contains("run basket-sync -C"), "\(command): \(run.status) \(run.stderr)")
        }
        for id in ["c1", "c2"] { #expect(playground.names("\(id)/inbox/new").isEmpty, "\(id): nothing delivered") }
        // On the root, apply and wait say the two carts whose records wait (never "nothing to apply").
        let rootApply = try basketSync(["-C", playground.path, "apply"])
        #expect(rootApply.status != 0 && rootApply.stderr.contains("holds the marker of cart"), "\(rootApply.status) \(rootApply.stdout) \(rootApply.stderr)")
        let rootWait = try basketSync(["-C", playground.path, "wait", "--timeout", "0"])
        #expect(rootWait.status == 75 && rootWait.stderr.contains("holds the marker of cart"), "\(rootWait.status) \(rootWait.stderr)")
        swap()
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        // A cart's folder moved under another id with a link (or a file) left at its name: the
        // same — refused, adoption too, and said so by the root's status.
        #expect(rename(playground.path + "/c1", playground.path + "/c9") == 0 && symlink(playground.path + "/c9", playground.path + "/c1") == 0)
        let adopt = try basketSync(["-C", playground.path + "/c9", "init", "--adopt"])
        #expect(adopt.status == 73 && adopt.stderr.contains("holds the marker of cart \"c1\""), "\(adopt.status) \(adopt.stderr)")
        let moved = try basketSync(["-C", playground.path, "status"])
        #expect(moved.stdout.contains("c9: ") && moved.stdout.contains("holds the marker of cart \"c1\"") && !moved.stdout.contains("c9 init --adopt"), "\(moved.stdout)")
        #expect(unlink(playground.path + "/c1") == 0 && rename(playground.path + "/c9", playground.path + "/c1") == 0)
        for id in ["c1", "c2"] {
            #expect(playground.records("\(id)/outbox.jsonl").map { $0["source"] as? String } == ["first-\(id)"], "\(id)")
            #expect(try basketSync(["-C", playground.path + "/" + id, "push", "--id", "again-\(id)", "X=+1"]).status == 0, "\(id): put back, it takes deliveries")
        }
    }

    /// A cart directory removed ends the cart; one made again under its id is a new cart: a new
    /// sync id, seq from 1, and none of the old records appended to it — under the agent, and
    /// while it is down.
    @Test func aCartRemovedAndMadeAgainStartsOver() async throws {
        let playground = try tree()
        try mealzLine(playground, "c")
        try mealzLine(playground, "c")
        let agent = try AgentProcess(directory: playground.path)
        try await agent.waitUntilWatching()
        try await eventually("two records") { playground.records("c/outbox.jsonl").count == 2 }
        let firstId = playground.read("c/.basket-sync-cart")

        try FileManager.default.removeItem(at: playground.url("c"))
        try await eventually("the agent stops serving the cart") { agent.log.contains("cart c: its directory left the tree: not served") }
        // Kept a while to be put back: a delivery meanwhile is refused for now (75), nothing made.
        #expect(try basketSync(["-C", playground.path + "/c", "push", "A=+1"]).status == 75)
        #expect(!FileManager.default.fileExists(atPath: playground.path + "/c"))
        // The host makes it again: a new cart, which takes deliveries.
        try mkdir(playground, "c")
        try await eventually("the directory made again is a new cart") { FileManager.default.fileExists(atPath: playground.path + "/c/.basket-sync-cart") }
        try mealzLine(playground, "c", quantity: 5)
        try await eventually("the new cart's first record") { playground.records("c/outbox.jsonl").count == 1 }
        let records = playground.records("c/outbox.jsonl")
        #expect(records.first?["seq"] as? Int == 1 && products(records[0]) == ["A": 5], "\(records)")
        let secondId = playground.read("c/.basket-sync-cart")
        // A name that only looks like a cart's end (a .basket-sync made and removed inside it, a
        // file named like a cart id in the root) ends nothing.
        try mkdir(playground, "c/.basket-sync")
        try FileManager.default.removeItem(at: playground.url("c/.basket-sync"))
        try playground.write("x1", "not a cart")
        try FileManager.default.removeItem(at: playground.url("x1"))
        try mealzLine(playground, "c", quantity: 6)
        try await eventually("the cart goes on: its second record") { playground.records("c/outbox.jsonl").count == 2 }
        #expect(playground.records("c/outbox.jsonl").map { $0["seq"] as? Int } == [1, 2])
        #expect(secondId != firstId && (records[0]["id"] as? String)?.hasPrefix(secondId.trimmingCharacters(in: .newlines)) == true)
        #expect(agent.stop() == 0)

        // While the agent is down: removed and made again by the host.
        try FileManager.default.removeItem(at: playground.url("c"))
        try mkdir(playground, "c")
        try playground.writeAtomically("c/cart.json", cartJSON([("A", 1)]))
        let again = try AgentProcess(directory: playground.path)
        try await again.waitUntilWatching()
        try await eventually("the third cart is notified") { notified(playground, "c").count == 1 }
        #expect(playground.records("c/outbox.jsonl").isEmpty, "no old record appended")
        #expect(notified(playground, "c").first?["seq"] as? Int == 1)
        #expect(playground.read("c/.basket-sync-cart") != secondId)
        #expect(again.stop() == 0)
    }

    @Test func oneAgentPerTreeAndNoneInsideACart() async throws {
        let playground = try tree()
        try mealzLine(playground, "c")
        let agent = try AgentProcess(directory: playground.path)
        try await agent.waitUntilWatching()
        let second = try basketSync(["-C", playground.path, "watch"])
        #expect(second.status == 75 && second.stderr.contains("already watching this tree"), "\(second.stderr)")
        let inside = try basketSync(["-C", playground.path + "/c", "watch"])
        #expect(inside.status == 75 && inside.stderr.contains("one agent serves whole"), "\(inside.stderr)")
        #expect(agent.stop() == 0)
        // Refused as well when no tree agent runs, and a sync directory made inside a cart is refused.
        let alone = try basketSync(["-C", playground.path + "/c", "watch"])
        #expect(alone.status == 75, "\(alone.stderr)")
        try mkdir(playground, "own/.basket-sync")
        let own = try basketSync(["-C", playground.path + "/own", "sync"])
        #expect(own.status == 73 || own.status == 64 || own.status == 78 || own.stderr.contains("holds a sync directory of its own"), "\(own.status) \(own.stderr)")
        #expect(own.stderr.contains("holds a sync directory of its own"), "\(own.stderr)")
        // The root holds no cart of its own: commands of one cart name one.
        let push = try basketSync(["-C", playground.path, "push", "A=+1"])
        #expect(push.status == 64 && push.stderr.contains("/CART-ID"), "\(push.stderr)")
        // A cart id is a name, never a path out of the tree.
        let odd = try basketSync(["-C", playground.path + "/.hidden", "push", "A=+1"])
        #expect(odd.status != 0 && !FileManager.default.fileExists(atPath: playground.url(".hidden").path))
    }

    /// A tree of carts a, b and c polled every 50 ms past a limit of 12 watches, its agent
    /// watching: a and b watched (1 + 2 × 4 watches), c polled — auto whatever the suite's
    /// environment says.
    func threeCartsOverTheWatchLimit() async throws -> (Playground, AgentProcess) {
        let playground = try tree()
        let settings = playground.read("basket-sync.json").replacingOccurrences(of: "\"pollIntervalMs\": 1000", with: "\"pollIntervalMs\": 50")
        try playground.writeAtomically("basket-sync.json", settings)
        for id in ["a", "b", "c"] { try mkdir(playground, id) }
        let agent = try AgentProcess(directory: playground.path, environment: ["BASKET_SYNC_MAX_WATCHES": "12", "BASKET_SYNC_WATCH_MODE": ""])
        try await agent.waitUntilWatching()
        return (playground, agent)
    }

    /// Watches are counted as the agent holds them: a cart that leaves gives its own back (the
    /// kernel says so), and a cart polled for want of them is watched with them — over weeks of
    /// carts coming and going, carts are not left polled while watches are free.
    @Test func watchesACartThatLeftGaveBackGoToACartPolledForWantOfThem() async throws {
        let (playground, agent) = try await threeCartsOverTheWatchLimit()
        func watch() throws -> String { try basketSync(["-C", playground.path, "status"]).stdout.split(separator: "\n").first { $0.hasPrefix("watch: ") }.map(String.init) ?? "" }
        let first = try watch()
        #expect(first.hasPrefix("watch: 1 of 3 carts polled"), "\(first)")
        try FileManager.default.removeItem(atPath: playground.path + "/a")
        try await eventually("c takes the watches a gave back") { try watch().hasPrefix("watch: inotify") }
        try playground.writeAtomically("c/cart.json", cartJSON([("X", 3)]))
        try await eventually("cart c is notified") { notified(playground, "c").count == 1 }
        // No watch left again: the next cart is polled, and served.
        try mkdir(playground, "d")
        try await eventually("d is polled") { try watch().hasPrefix("watch: 1 of 3 carts polled") }
        try playground.writeAtomically("d/cart.json", cartJSON([("X", 4)]))
        try await eventually("cart d is notified") { notified(playground, "d").count == 1 }
        #expect(agent.stop() == 0)
    }

    /// Watches another program of the same user held when a cart came, and gave back since
    /// without a word (the kernel tells nobody), are taken back: the cart polled for want of them
    /// is watched within the agent's probe, no cart coming or leaving needed. The limit is the
    /// kernel's own, set to 40 in a user namespace of the test's (the machine's is left alone);
    /// the other program holds what is left of it, in the same namespace, until told to go.
    @Test func watchesAnotherProgramGaveBackAreTakenBack() async throws {
        let playground = try tree()
        for id in ["c1", "c2", "c3"] { try mkdir(playground, id) }
        let work = try Playground()
        let grabber = """
            import ctypes, os, sys, time
            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            fd = libc.inotify_init()
            held = 0
            for i in range(1000):
                folder = "%s/g%d" % (sys.argv[1], i)
                os.makedirs(folder, exist_ok=True)
                if libc.inotify_add_watch(fd, folder.encode(), 0x100) < 0: break
                held += 1
            open(sys.argv[1] + "/held", "w").write(str(held))
            while not os.path.exists(sys.argv[1] + "/release"): time.sleep(0.05)
            """
        try work.write("grab.py", grabber)
        // One user namespace for the agent and the other program: its limit is theirs.
        let script = """
            echo 40 > /proc/sys/user/max_inotify_watches || exit 3
            BASKET_SYNC_WATCH_MODE= "$1" -C "$2" watch > "$3/agent.log" 2>&1 &
            agent=$!
            while ! grep -q watching "$3/agent.log"; do kill -0 $agent || exit 4; sleep 0.05; done
            python3 "$3/grab.py" "$3" &
            while [ ! -e "$3/stop" ]; do sleep 0.05; done
            kill $agent; wait $agent; exit $?
            """
        let namespace = Process()
        namespace.executableURL = URL(fileURLWithPath: "/usr/bin/unshare")
        namespace.arguments = ["--user", "--map-root-user", "/bin/bash", "-c", script, "bash", binary.path, playground.path, work.path]
        try namespace.run()
        defer { if namespace.isRunning { try? work.write("stop", ""); try? work.write("release", ""); namespace.waitUntilExit() } }
        func watch() throws -> String { try basketSync(["-C", playground.path, "status"]).stdout.split(separator: "\n").first { $0.hasPrefix("watch: ") }.map(String.init) ?? "" }
        try await eventually("the other program holds the watches left") { FileManager.default.fileExists(atPath: work.path + "/held") }
        #expect(work.read("agent.log").contains("the limit is 40"), "the namespace's limit is the one that binds: \(work.read("agent.log"))")
        #expect(try watch().hasPrefix("watch: inotify"), "\(work.read("agent.log"))")
        try mkdir(playground, "c4")
        try await eventually("c4 is polled for want of watches") { try watch().hasPrefix("watch: 1 of 4 carts polled") }
        try playground.writeAtomically("c4/cart.json", cartJSON([("X", 1)]))
        try await eventually("c4, polled, is served") { notified(playground, "c4").count == 1 }
        try work.write("release", "")
        try await eventually("c4 is watched with the watches given back", timeout: 120) { try watch().hasPrefix("watch: inotify") }
        #expect(try basketSync(["-C", playground.path + "/c4", "push", "A=+1"]).status == 0)
        try await eventually("an event into c4, watched, is taken") { playground.records("c4/outbox.jsonl").count == 1 }
        try playground.writeAtomically("c4/cart.json", cartJSON([("X", 1), ("A", 1)], syncedThrough: 1))
        try await eventually("c4, watched, is served") { notified(playground, "c4").count == 2 }
        try work.write("stop", "")
        namespace.waitUntilExit()
        #expect(namespace.terminationStatus == 0, "\(work.read("agent.log"))")
    }

    /// Past the inotify watches it may use, the agent says how many the tree needs and what raises
    /// the limit (here BASKET_SYNC_MAX_WATCHES, which lowers it below the system's; the sysctl when
    /// the system's is the one short), and polls the carts beyond it (docs/spec.md §10): every cart
    /// is served.
    @Test func pastTheWatchLimitTheCartsBeyondArePolledAndTheSysctlNamed() async throws {
        let (playground, agent) = try await threeCartsOverTheWatchLimit()
        #expect(agent.log.contains("3 carts need 13 inotify watches, over the limit of 12") && agent.log.contains("BASKET_SYNC_MAX_WATCHES lowers the limit below the system's"), "the advice that helps here: \(agent.log)")
        #expect(agent.log.contains("1 of 3 carts polled every 50 ms, the others inotify"), "\(agent.log)")
        for (index, id) in ["a", "b", "c"].enumerated() { try playground.writeAtomically("\(id)/cart.json", cartJSON([("X", index + 1)])) }
        for id in ["a", "b", "c"] {
            try await eventually("cart \(id) is notified") { notified(playground, id).count == 1 }
        }
        // A cart made past the limit while it runs is polled too, and served.
        try mkdir(playground, "d")
        try playground.writeAtomically("d/cart.json", cartJSON([("X", 4)]))
        try await eventually("cart d, made while running, is notified") { notified(playground, "d").count == 1 }
        // status says how the running agent watches, counting the cart made since its start.
        let status = try basketSync(["-C", playground.path, "status"])
        #expect(status.stdout.contains("watch: 2 of 4 carts polled every 50 ms, the others inotify (the agent, pid \(agent.process.processIdentifier))"), "\(status.stdout)")
        try mealzLine(playground, "c", quantity: 2)
        try await eventually("an event in the polled cart reaches its outbox") { playground.records("c/outbox.jsonl").count == 1 }
        #expect(agent.stop() == 0)
        // Within the limit every cart is watched with inotify.
        let fits = try AgentProcess(directory: playground.path, environment: ["BASKET_SYNC_MAX_WATCHES": "17", "BASKET_SYNC_WATCH_MODE": ""])
        try await fits.waitUntilWatching()
        #expect(fits.log.contains("17 inotify watches needed (4 per cart), the limit is 17") && fits.log.contains("4 carts, inotify"), "\(fits.log)")
        #expect(fits.stop() == 0)
    }

    /// Watches refused for want of them (other programs of this user hold the rest: the shim's
    /// FAULTSHIM_WATCHES) at any point of a cart's four — after its folder, after its inbox —
    /// leave no cart half watched: the cart whose watches could not all be placed, and every one
    /// after it, are polled and served; the log names the sysctl, not a full disk. With no watch
    /// at all, the whole tree is polled.
    @Test(arguments: [0, 1, 1 + 4 + 1, 1 + 4 + 2, 1 + 4 + 3, 1 + 4 * 2 + 2])
    func watchesRefusedAtAnyPointLeaveNoCartHalfWatched(watches: Int) async throws {
        let playground = try tree()
        let settings = playground.read("basket-sync.json").replacingOccurrences(of: "\"pollIntervalMs\": 1000", with: "\"pollIntervalMs\": 50")
        try playground.writeAtomically("basket-sync.json", settings)
        let ids = ["a", "b", "c", "d"]
        for id in ids { try mkdir(playground, id) }
        let agent = try AgentProcess(directory: playground.path, environment: [
            "LD_PRELOAD": FaultTests.shim, "FAULTSHIM_WATCHES": String(watches), "BASKET_SYNC_WATCH_MODE": "",
        ])
        try await agent.waitUntilWatching()
        #expect(agent.log.contains("the inotify watch limit is reached") && agent.log.contains("fs.inotify.max_user_watches"), "watches \(watches): \(agent.log)")
        #expect(!agent.log.contains("disk space"), "watches \(watches): \(agent.log)")
        // Each cart's inbox takes an event, and its cart a version: whether watched or polled.
        for (index, id) in ids.enumerated() {
            try mealzLine(playground, id, quantity: index + 1)
            try playground.writeAtomically("\(id)/cart.json", cartJSON([("X", index + 1)]))
        }
        for id in ids {
            try await eventually("watches \(watches): cart \(id)'s event reaches its outbox") { playground.records("\(id)/outbox.jsonl").count == 1 }
            try await eventually("watches \(watches): cart \(id) is notified") { notified(playground, id).count >= 1 }
        }
        #expect(agent.stop() == 0)
    }

    /// The engines of a tree's carts are kept for the recently used only; a cart whose engine was
    /// dropped keeps its pending window, and the agent rolls it back on time (a new engine reads
    /// the deadline, else the window would be forgotten). The descriptor limit
    /// lowered with prlimit keeps 9 engines for 20 carts.
    @Test func pendingWindowsExpireInCartsWhoseEngineWasDropped() async throws {
        let playground = try tree()
        let settings = playground.read("basket-sync.json").replacingOccurrences(of: "\"pendingTimeoutSeconds\": 10", with: "\"pendingTimeoutSeconds\": 2")
        try playground.writeAtomically("basket-sync.json", settings)
        let ids = (0..<20).map { "c\($0)" }
        for id in ids { try mealzLine(playground, id) }
        let agent = Child()
        agent.executableURL = URL(fileURLWithPath: "/usr/bin/prlimit")
        agent.arguments = ["--nofile=100", binary.path, "-C", playground.path, "watch"]
        agent.standardOutput = FileHandle.nullDevice
        agent.standardError = FileHandle.nullDevice
        agent.standardInput = FileHandle.nullDevice
        try agent.run()
        defer { kill(agent.processIdentifier, SIGKILL); agent.waitUntilExit() }
        try await eventually("every cart's event is taken") { ids.allSatisfy { playground.records("\($0)/outbox.jsonl").count == 1 } }
        // No host echoes: every batch is rolled back when its window closes, in every cart.
        try await eventually("every window is over and rolled back", timeout: 60) {
            let status = try basketSync(["-C", playground.path, "status"])
            return status.stdout.contains("pending batches: none")
        }
        for id in ids {
            let status = try basketSync(["-C", "\(playground.path)/\(id)", "status", "--json"])
            #expect(status.stdout.contains("\"rolledBack\":1"), "cart \(id): \(status.stdout)")
        }
    }

    /// `inbox/new` removed and made again under the agent is watched again; a cart
    /// whose `inbox/new` is not a directory when taken on is reported, then served once it is fixed.
    @Test func anInboxFolderMadeAgainUnderTheAgentIsWatchedAgain() async throws {
        let playground = try tree()
        try mealzLine(playground, "m")
        try mkdir(playground, "broken/inbox/tmp")
        try playground.write("broken/inbox/new", "a file")
        let agent = try AgentProcess(directory: playground.path)
        try await agent.waitUntilWatching()
        try await eventually("m's first event") { playground.records("m/outbox.jsonl").count == 1 }
        try FileManager.default.removeItem(at: playground.url("m/inbox/new"))
        try mkdir(playground, "m/inbox/new")
        try mealzLine(playground, "m")
        try await eventually("the event delivered into the new folder is taken") { playground.records("m/outbox.jsonl").count == 2 }
        let status = try basketSync(["-C", playground.path, "status"])
        #expect(status.stdout.contains("  broken: ") && status.stdout.contains("inbox/new"), "\(status.stdout)")
        try FileManager.default.removeItem(at: playground.url("broken/inbox/new"))
        try mkdir(playground, "broken/inbox/new")
        try mealzLine(playground, "broken")
        try await eventually("the fixed cart is served") { playground.records("broken/outbox.jsonl").count == 1 }
        #expect(agent.stop() == 0)
    }

    /// Where a directory stands is told right, before anything is made.
    /// Two carts' kept values swapped in the database (by hand, a restore gone wrong): each is
    /// another synchronization's, refused (74) with the way out — never one shopper's state
    /// serving another, nor another cart's ids written into this cart's files.
    @Test func cartsWhoseKeptValuesAreAnotherCartsAreRefused() throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init", "--tree"]).status == 0)
        for id in ["alice", "bob"] { #expect(try basketSync(["-C", playground.path + "/" + id, "push", "A=+1"]).status == 0) }
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        var handle: OpaquePointer?
        #expect(sqlite3_open(playground.path + "/.basket-sync/state.db", &handle) == SQLITE_OK)
        for sql in ["UPDATE kept SET cart = -1 WHERE cart = (SELECT n FROM carts WHERE id = 'alice')",
                    "UPDATE kept SET cart = (SELECT n FROM carts WHERE id = 'alice') WHERE cart = (SELECT n FROM carts WHERE id = 'bob')",
                    "UPDATE kept SET cart = (SELECT n FROM carts WHERE id = 'bob') WHERE cart = -1"] {
            #expect(sqlite3_exec(handle, sql, nil, nil, nil) == SQLITE_OK, "\(sql)")
        }
        sqlite3_close(handle)
        #expect(try basketSync(["-C", playground.path + "/bob", "push", "A=+1"]).status == 0)
        let refused = try basketSync(["-C", playground.path + "/bob", "sync"])
        #expect(refused.status == 74 && refused.stderr.contains("cart \"bob\"'s kept values are another synchronization's") && refused.stderr.contains("init --tree --adopt"), "\(refused.status) \(refused.stderr)")
        #expect(playground.records("bob/outbox.jsonl").count == 1, "nothing written with alice's ids")
    }

    @Test func misplacedCommandsAreRefusedBeforeTheyMakeAnything() throws {
        let playground = try tree()
        try mealzLine(playground, "c")
        let single = try Playground()
        #expect(try basketSync(["-C", single.path, "init"]).status == 0)
        // Nothing inside a cart, a tree or a sync directory but a tree's carts.
        for (command, made) in [
            (["-C", playground.path + "/c/sub", "init"], playground.path + "/c/sub"),
            (["-C", playground.path + "/c/inbox", "init", "--tree"], playground.path + "/c/inbox/basket-sync.json"),
            (["-C", playground.path + "/e", "init", "--tree"], playground.path + "/e"),
            (["-C", single.path + "/sub", "init"], single.path + "/sub"),
            (["-C", single.path + "/sub", "init", "--tree"], single.path + "/sub"),
        ] {
            let run = try basketSync(command)
            #expect(run.status == 73 && (run.stderr.contains("is inside") || run.stderr.contains("inside a tree")), "\(command): \(run.status) \(run.stderr)")
            #expect(!FileManager.default.fileExists(atPath: made), "\(command) made \(made)")
        }
        // A name under a tree that is not a cart id — nor the root's own configuration, whose
        // name fits the characters of an id: every command refuses it (64), none advises removing it.
        for name in ["with space", "basket-sync.json"] {
            for command in [["push", "A=+1"], ["sync"], ["apply"], ["status"], ["init"]] {
                let odd = try basketSync(["-C", playground.path + "/" + name] + command)
                #expect(odd.status == 64 && odd.stderr.contains("is not a cart id") && !odd.stderr.contains("remove"), "\(name), \(command): \(odd.status) \(odd.stderr)")
            }
        }
        #expect(playground.read("basket-sync.json").contains("\"layout\": \"tree\""))
        // A tree's configuration copied into a cart's folder is none of the cart's: the cart is
        // the tree's still, its commands work.
        try playground.write("c/basket-sync.json", playground.read("basket-sync.json"))
        for command in [["status"], ["push", "A=+1"], ["sync"], ["apply"]] {
            let run = try basketSync(["-C", playground.path + "/c"] + command)
            #expect(run.status == 0, "a configuration copied into the cart, \(command): \(run.status) \(run.stderr)")
        }
        try FileManager.default.removeItem(atPath: playground.path + "/c/basket-sync.json")
        // A broken tree configuration is its error, with its place — but a delivery into the
        // cart, which is made, goes on.
        let configuration = playground.read("basket-sync.json")
        try playground.write("basket-sync.json", configuration.replacingOccurrences(of: "\"pendingTimeoutSeconds\": 10", with: "\"pendingTimeoutSeconds\": \"x\""))
        for command in [["sync"], ["apply"], ["status"], ["init"]] {
            let run = try basketSync(["-C", playground.path + "/c"] + command)
            #expect(run.status == 78 && run.stderr.contains("basket-sync.json:"), "\(command): \(run.status) \(run.stderr)")
        }
        #expect(try basketSync(["-C", playground.path + "/c", "push", "A=+1"]).status == 0)
        #expect(!FileManager.default.fileExists(atPath: playground.path + "/c/.basket-sync"))
        // "layout" changed on a tree's root: a configuration error, nothing made.
        try playground.write("basket-sync.json", configuration.replacingOccurrences(of: "\"layout\": \"tree\"", with: "\"layout\": \"directory\""))
        // The error names the setting's value, as any wrong value's does.
        let lines = playground.read("basket-sync.json").split(separator: "\n", omittingEmptySubsequences: false)
        let layoutLine = try #require(lines.firstIndex { $0.contains("\"layout\"") })
        let layoutColumn = lines[layoutLine].distance(from: lines[layoutLine].startIndex, to: try #require(lines[layoutLine].range(of: "\"directory\"")).lowerBound) + 1
        for command in [["sync"], ["status"], ["init"]] {
            let run = try basketSync(["-C", playground.path] + command)
            #expect(run.status == 78 && run.stderr.contains("basket-sync.json:\(layoutLine + 1):\(layoutColumn): the database is a tree's"), "\(command): \(run.status) \(run.stderr)")
        }
        #expect(!FileManager.default.fileExists(atPath: playground.path + "/inbox"))
        // The same on the root, and with the file gone.
        try playground.write("basket-sync.json", "{\"layout\": 5}")
        for command in [["status"], ["init", "--tree"]] {
            let run = try basketSync(["-C", playground.path] + command)
            #expect(run.status == 78 && run.stderr.contains("basket-sync.json:1:"), "\(command): \(run.status) \(run.stderr)")
        }
        try FileManager.default.removeItem(at: playground.url("basket-sync.json"))
        let lost = try basketSync(["-C", playground.path + "/c", "sync"])
        #expect(lost.status == 78 && lost.stderr.contains("basket-sync.json:1:1: the database is a tree's"), "no file, no setting: its start is named: \(lost.status) \(lost.stderr)")
        // A tree is not made over a sync directory.
        let above = try Playground()
        #expect(try basketSync(["-C", above.path + "/s", "init"]).status == 0)
        let over = try basketSync(["-C", above.path, "init", "--tree"])
        #expect(over.status == 73 && over.stderr.contains("is a sync directory of its own"), "\(over.stderr)")
        #expect(!FileManager.default.fileExists(atPath: above.path + "/basket-sync.json"))
    }

    /// An `inbox` that is a link out of the tree is never made through, whoever takes the cart on.
    @Test func anInboxLinkedOutOfTheTreeIsNeverMadeThrough() async throws {
        let playground = try tree()
        let outside = try Playground()
        try mkdir(playground, "c")
        #expect(symlink(outside.path, playground.url("c/inbox").path) == 0)
        for command in [["-C", playground.path + "/c", "init"], ["-C", playground.path + "/c", "push", "A=+1"], ["-C", playground.path, "sync"]] {
            let run = try basketSync(command)
            #expect(run.status != 0 && run.stderr.contains("inbox"), "\(command): \(run.status) \(run.stderr)")
        }
        let agent = try AgentProcess(directory: playground.path)
        try await agent.waitUntilWatching()
        #expect(agent.stop() == 0)
        #expect(outside.names(".").isEmpty, "nothing made outside: \(outside.names("."))")
    }

    /// A directory new to the tree that holds records (a cart copied, moved, its marker
    /// lost) is refused and the cart it may replace kept; `init --adopt` makes it a cart that goes
    /// on after its records.
    /// Many new carts met at once (a first pass) are adopted together: each gets its own marker,
    /// matching its row, and its folders, and its event and cart are taken; a directory that
    /// holds records, or another tree's marker, among them is left to the one-by-one rules
    /// (refused, or taken as made again) without stopping the others.
    @Test func manyNewCartsAreAdoptedTogetherAndTheOddOnesByTheRules() throws {
        let playground = try tree()
        let ids = (0..<60).map { "n\($0)" }
        // Made as a host and the Mealz side make them, without basket-sync (a push would adopt each).
        for id in ids {
            for folder in ["inbox/tmp", "inbox/new"] { try mkdir(playground, "\(id)/\(folder)") }
            try playground.write("\(id)/cart.json", cartJSON([("X", 1)]))
            try playground.write("\(id)/inbox/new/e1", "{\"id\":\"e1\",\"type\":\"basketDelta\",\"products\":[{\"id\":\"A\",\"quantity\":1}]}\n")
        }
        // One holds records of its own (copied from elsewhere), one another tree's marker.
        try playground.write("n7/outbox.jsonl", "{\"seq\":1,\"id\":\"x-1\",\"type\":\"updateBasket\",\"at\":\"2026-12-01T00:00:00.000Z\",\"products\":[{\"id\":\"A\",\"quantity\":1}]}\n")
        try playground.write("n9/.basket-sync-cart", "0123456789abcdef\n")
        let synced = try basketSync(["-C", playground.path, "sync"])
        #expect(synced.stderr.contains("n7") && synced.stderr.contains("holds records"), "\(synced.stderr)")
        let status = try basketSync(["-C", playground.path, "status", "--json"])
        let carts = ((try JSONSerialization.jsonObject(with: Data(status.stdout.utf8)) as? [String: Any])?["carts"] as? [[String: Any]]) ?? []
        var syncIds: Set<String> = []
        for id in ids where id != "n7" {
            let marker = playground.read("\(id)/.basket-sync-cart").trimmingCharacters(in: .whitespacesAndNewlines)
            let report = carts.first { $0["cart"] as? String == id }?["status"] as? [String: Any] ?? carts.first { $0["cart"] as? String == id } ?? [:]
            #expect(report["syncId"] as? String == marker, "\(id): its marker is its row's (\(marker))")
            syncIds.insert(marker)
            #expect(playground.records("\(id)/outbox.jsonl").count == 1 && playground.records("\(id)/notifications.jsonl").count == 1, "\(id) taken")
            for folder in ["tmp", "new", "cur", "bad"] { #expect(FileManager.default.fileExists(atPath: playground.path + "/\(id)/inbox/\(folder)")) }
        }
        #expect(syncIds.count == ids.count - 1, "each its own id")
        #expect(playground.records("n7/outbox.jsonl").count == 1 && !FileManager.default.fileExists(atPath: playground.path + "/n7/.basket-sync-cart"), "n7 untouched")
    }

    @Test func aDirectoryNewToTheTreeThatHoldsRecordsIsRefusedUntilAdopted() throws {
        let playground = try tree()
        for _ in 0..<3 { try mealzLine(playground, "a") }
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        try FileManager.default.copyItem(at: playground.url("a"), to: playground.url("copy"))
        try FileManager.default.removeItem(at: playground.url("a/.basket-sync-cart"))
        for id in ["a", "copy"] {
            let refused = try basketSync(["-C", playground.path + "/" + id, "sync"])
            #expect(refused.status == 73 && refused.stderr.contains("holds records (outbox.jsonl up to 3") && refused.stderr.contains("init --adopt"), "\(id): \(refused.status) \(refused.stderr)")
        }
        let root = try basketSync(["-C", playground.path, "sync"])
        #expect(root.status != 0 && root.stderr.contains("holds records"), "\(root.stderr)")
        #expect(playground.records("a/outbox.jsonl").count == 3, "nothing changed")
        let adopted = try basketSync(["-C", playground.path + "/copy", "init", "--adopt"])
        #expect(adopted.status == 0 && adopted.stdout.contains("adopted 3 records"), "\(adopted.stdout)\(adopted.stderr)")
        try mealzLine(playground, "copy")
        #expect(try basketSync(["-C", playground.path + "/copy", "sync"]).status == 0)
        #expect(playground.records("copy/outbox.jsonl").map { $0["seq"] as? Int } == [1, 2, 3, 4])
        // A marker written with other line endings is the same marker.
        let marker = playground.read("copy/.basket-sync-cart").trimmingCharacters(in: .whitespacesAndNewlines)
        try playground.write("copy/.basket-sync-cart", marker + "\r\n\t")
        #expect(try basketSync(["-C", playground.path + "/copy", "sync"]).status == 0)
    }

    /// A cart copied under the agent (the agent takes on the empty directory before
    /// the copy's records land) is given back and refused, not stuck; `init --adopt` under the
    /// agent is seen by it; a whole `inbox/` made again is watched again; a marker overwritten
    /// makes the agent take the cart as it is now.
    @Test func identityChangesUnderTheAgentAreFollowed() async throws {
        let playground = try tree()
        for _ in 0..<3 { try mealzLine(playground, "a") }
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        let agent = try AgentProcess(directory: playground.path)
        try await agent.waitUntilWatching()
        // The copy's directory first (adopted empty), then its files.
        try mkdir(playground, "copy")
        try await eventually("the empty directory is adopted") { FileManager.default.fileExists(atPath: playground.path + "/copy/.basket-sync-cart") }
        // Each file copied beside, then renamed over what the agent may have made meanwhile.
        for file in ["outbox.jsonl", "notifications.jsonl"] where FileManager.default.fileExists(atPath: playground.path + "/a/" + file) {
            let staged = playground.path + "/copy-" + file
            try FileManager.default.copyItem(atPath: playground.path + "/a/" + file, toPath: staged)
            #expect(rename(staged, playground.path + "/copy/" + file) == 0)
        }
        // Delivered, or refused already if the agent gave the copy back first: either is right.
        _ = try basketSync(["-C", playground.path + "/copy", "push", "A=+1"])
        try await eventually("the copy is given back and refused") { agent.log.contains("cart copy: ") && agent.log.contains("given back") }
        #expect(!FileManager.default.fileExists(atPath: playground.path + "/copy/.basket-sync-cart"))
        let adopted = try basketSync(["-C", playground.path + "/copy", "init", "--adopt"])
        #expect(adopted.status == 0 && adopted.stdout.contains("adopted 3 records"), "\(adopted.stdout)\(adopted.stderr)")
        #expect(try basketSync(["-C", playground.path + "/copy", "push", "--id", "after-adopt", "A=+1"]).status == 0)
        try await eventually("the agent serves the adopted copy, seq going on after its records") {
            let records = playground.records("copy/outbox.jsonl")
            return records.last?["source"] as? String == "after-adopt" && records.map { $0["seq"] as? Int } == Array(1...records.count).map { Optional($0) }
        }
        // inbox/ removed whole and made again.
        try FileManager.default.removeItem(at: playground.url("a/inbox"))
        try mkdir(playground, "a/inbox")
        try mkdir(playground, "a/inbox/new")
        try mkdir(playground, "a/inbox/tmp")
        try mealzLine(playground, "a")
        try await eventually("the event in the new inbox is taken") { playground.records("a/outbox.jsonl").count == 4 }
        // A marker overwritten: the agent no longer serves the cart as it was.
        try playground.write("a/.basket-sync-cart", "ffffffffffffffff\n")
        try await eventually("the agent takes the cart as it is now") { agent.log.contains("cart a: its marker .basket-sync-cart names another sync directory now") }
        let sync = try basketSync(["-C", playground.path + "/a", "sync"])
        #expect(sync.status == 73 && sync.stderr.contains("holds records"), "\(sync.stderr)")
        #expect(agent.stop() == 0)
    }

    /// A marker lost under the agent (removed, emptied, a link or a directory in its place) is
    /// said as lost, never as another cart's, and the agent writes nothing into the directory
    /// (it may be on its way out) until a command takes it on: `sync` refuses it while it holds
    /// records, `init --adopt` makes it a cart the agent serves again.
    @Test(arguments: ["removed", "emptied", "directory", "link"])
    func aMarkerLostUnderTheAgentIsSaidAsLostAndWaitsForACommand(shape: String) async throws {
        let playground = try tree()
        try mkdir(playground, "b")
        for id in ["a", "b"] { try mealzLine(playground, id) }
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        let agent = try AgentProcess(directory: playground.path)
        try await agent.waitUntilWatching()
        let marker = playground.path + "/a/.basket-sync-cart"
        let staged = playground.path + "/staged"
        switch shape {
        case "emptied": try playground.write("a/.basket-sync-cart", "")
        case "directory":
            try mkdir(playground, "staged")
            #expect(unlink(marker) == 0 && rename(staged, marker) == 0)
        case "link": #expect(symlink("../b/.basket-sync-cart", staged) == 0 && rename(staged, marker) == 0)
        default: #expect(unlink(marker) == 0)
        }
        try await eventually("\(shape): the agent says the marker is gone") { agent.log.contains("cart a: its marker .basket-sync-cart is gone") }
        #expect(!agent.log.contains("names another"), "\(shape): \(agent.log)")
        #expect(!agent.log.contains("cart a: taken on again"), "\(shape): \(agent.log)")
        // Not served: a new cart version is not notified, and nothing is written into it.
        try playground.writeAtomically("a/cart.json", cartJSON([("A", 3)]))
        let sync = try basketSync(["-C", playground.path + "/a", "sync"])
        #expect(sync.status == 73 && sync.stderr.contains("holds records"), "\(shape): \(sync.stderr)")
        // status says it as every command does: what to run.
        let status = try basketSync(["-C", playground.path + "/a", "status"])
        #expect(status.status == 73 && status.stderr.contains("init --adopt"), "\(shape): \(status.stderr)")
        #expect(playground.records("a/notifications.jsonl").isEmpty, "\(shape)")
        // Adopted: served again, its records going on.
        for path in [marker] where shape == "directory" { try FileManager.default.removeItem(atPath: path) }
        for path in [marker] where shape == "link" { #expect(unlink(path) == 0) }
        let adopted = try basketSync(["-C", playground.path + "/a", "init", "--adopt"])
        #expect(adopted.status == 0, "\(shape): \(adopted.stdout)\(adopted.stderr)")
        try playground.writeAtomically("a/cart.json", cartJSON([("A", 4)]))
        try await eventually("\(shape): the adopted cart is served") { playground.records("a/notifications.jsonl").count == 1 }
        let stopped = agent.stop()
        #expect(stopped == 0, "\(shape): \(agent.log)")
    }

    /// Two carts' directories swapped under the agent (`renameat2` with `RENAME_EXCHANGE`: each
    /// name holds the other's marker and records) are refused — `init --adopt` too, which would
    /// make each shopper's records the other's; swapped back, both are served again with their
    /// state: their events taken, their new versions notified — however often they are swapped,
    /// and whether the agent saw each refusal or not (the kernel keeps one watch per folder: the
    /// watch of a folder swapped in is the other cart's).
    @Test(arguments: [(true, 1), (false, 1), (true, 2), (false, 2), (false, 3)])
    func cartsSwappedUnderTheAgentAreServedOnceSwappedBack(seenRefused: Bool, rounds: Int) async throws {
        let playground = try tree()
        for id in ["a", "b"] { try mealzLine(playground, id) }
        let agent = try AgentProcess(directory: playground.path)
        try await agent.waitUntilWatching()
        typealias RenameAt2 = @convention(c) (Int32, UnsafePointer<CChar>, Int32, UnsafePointer<CChar>, UInt32) -> Int32
        let symbol = try #require(dlsym(dlopen(nil, RTLD_NOW), "renameat2"), "glibc has renameat2")
        let renameat2 = unsafeBitCast(symbol, to: RenameAt2.self)
        for round in 1...rounds {
            #expect(renameat2(AT_FDCWD, playground.path + "/a", AT_FDCWD, playground.path + "/b", 2) == 0)
            if seenRefused {
                try await eventually("round \(round): both are refused") { agent.log.components(separatedBy: "it is not served until").count >= 2 * round + 1 }
            }
            for id in ["a", "b"] {
                let adopted = try basketSync(["-C", playground.path + "/" + id, "init", "--adopt"])
                #expect(adopted.status == 73 && adopted.stderr.contains("holds the marker of cart"), "round \(round), \(id): \(adopted.status) \(adopted.stdout)\(adopted.stderr)")
            }
            #expect(renameat2(AT_FDCWD, playground.path + "/a", AT_FDCWD, playground.path + "/b", 2) == 0)
        }
        for id in ["a", "b"] {
            #expect(try basketSync(["-C", playground.path + "/" + id, "push", "--id", "after-\(id)", "B=+1"]).status == 0)
            do {
                try await eventually("\(id): its events are taken", timeout: 20) { Set(playground.records("\(id)/outbox.jsonl").compactMap { $0["source"] as? String }).contains("after-\(id)") }
                #expect(playground.records("\(id)/outbox.jsonl").first?["source"] as? String != nil && playground.records("\(id)/outbox.jsonl").map { $0["seq"] as? Int } == [1, 2], "\(id): its own numbering went on")
                try playground.writeAtomically("\(id)/cart.json", cartJSON([("A", 1), ("B", 1)]))
                try await eventually("\(id): its new version is notified", timeout: 20) { !playground.records("\(id)/notifications.jsonl").isEmpty }
            } catch {
                // What the agent did, to tell a lost watch from a refusal that stayed.
                Issue.record("\(error): inbox/new \(playground.names("\(id)/inbox/new")), outbox \(playground.read("\(id)/outbox.jsonl")), status \((try? basketSync(["-C", playground.path + "/" + id, "status"]))?.stdout ?? ""), agent log:\n\(agent.log)")
                throw error
            }
        }
        let stopped = agent.stop()
        #expect(stopped == 0, "\(agent.log)")
    }

    /// A `wait` on a cart whose folder is swapped with another cart's, or moved out of the tree,
    /// while it waits says what every command says of it then (73, the other cart's marker, put
    /// the folders back; 66, the cart left the tree and is kept so long), never that a sync
    /// directory was removed with its state; and it prints nothing of the other cart's records.
    @Test(arguments: ["swapped", "moved out"])
    func aWaitOnACartMovedWhileItWaitsSaysWhatEveryCommandSays(how: String) async throws {
        let playground = try tree()
        for id in ["a", "b"] {
            try mkdir(playground, id)
            try playground.writeAtomically("\(id)/cart.json", cartJSON([], syncedThrough: 0))
            #expect(try basketSync(["-C", playground.path + "/" + id, "push", "--id", "first-\(id)", "A=+1"]).status == 0)
        }
        #expect(try basketSync(["-C", playground.path + "/b", "push", "--id", "second-b", "B=+1"]).status == 0)
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        let output = playground.path + "/../wait.out", errors = playground.path + "/../wait.err"
        let waiting = try startedInBackground(["-C", playground.path + "/a", "wait", "--after", "1", "--timeout", "600"], output: output, errors: errors)
        try await eventually("the wait sleeps") { sleepsInPoll(waiting) }
        typealias RenameAt2 = @convention(c) (Int32, UnsafePointer<CChar>, Int32, UnsafePointer<CChar>, UInt32) -> Int32
        let symbol = try #require(dlsym(dlopen(nil, RTLD_NOW), "renameat2"), "glibc has renameat2")
        let renameat2 = unsafeBitCast(symbol, to: RenameAt2.self)
        if how == "swapped" {
            #expect(renameat2(AT_FDCWD, playground.path + "/a", AT_FDCWD, playground.path + "/b", 2) == 0)
        } else {
            let away = try Playground()
            #expect(rename(playground.path + "/a", away.path + "/a") == 0)
        }
        try await eventually("the wait ends", timeout: 60) { !waiting.isRunning }
        let said = (try? String(contentsOfFile: errors, encoding: .utf8)) ?? ""
        let direct = try basketSync(["-C", playground.path + "/a", "status"])
        #expect(waiting.terminationStatus == direct.status && !said.contains("removed or moved away, and the state with it"), "\(how): \(waiting.terminationStatus) \(said), a command now: \(direct.status) \(direct.stderr)")
        if how == "swapped" {
            #expect(waiting.terminationStatus == 73 && said.contains("holds the marker of cart \"b\""), "\(waiting.terminationStatus): \(said)")
        } else {
            #expect(waiting.terminationStatus == 66 && said.contains("\(playground.path)/a: cart a's directory left the tree; the cart is kept"), "\(waiting.terminationStatus): \(said)")
        }
        #expect(((try? String(contentsOfFile: output, encoding: .utf8)) ?? "").isEmpty, "nothing of b's records printed as a's")
    }

    /// A command pointed at a folder inside a tree (or a sync directory) says which directory to
    /// point it at, never to run `init` there (refused inside one, 73).
    @Test func aCommandInsideATreeNamesTheDirectoryToUseNotInit() throws {
        let playground = try tree()
        try mealzLine(playground, "c1")
        let inside = playground.path + "/c1/inbox"
        for command in [["status"], ["sync"], ["apply"], ["wait", "--timeout", "0"], ["push", "A=+1"]] {
            let run = try basketSync(["-C", inside] + command)
            #expect(run.status == 66 && run.stderr.contains("inside \(playground.path)") && !run.stderr.contains("init there first"), "\(command): \(run.status) \(run.stderr)")
        }
        let initInside = try basketSync(["-C", inside, "init"])
        #expect(initInside.status == 73, "init is refused there, as the message says: \(initInside.stderr)")
    }

    /// A copy of a served cart (its marker and records with it), refused beside it, swapped in
    /// under the cart's name while the agent is held up: the cart goes on in the folder now at
    /// its name — its changes seen, its records written there, none into the folder swapped out
    /// (the folder's one watch, shared with the refused copy's, is the cart's now).
    @Test func aCopySwappedInUnderItsCartsNameIsThatCart() async throws {
        let playground = try tree()
        try mealzLine(playground, "c1")
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        try FileManager.default.copyItem(atPath: playground.path + "/c1", toPath: playground.path + "/c2")
        let agent = try AgentProcess(directory: playground.path)
        try await agent.waitUntilWatching()
        try await eventually("the copy is refused") { agent.log.contains("error: cart c2: ") }
        typealias RenameAt2 = @convention(c) (Int32, UnsafePointer<CChar>, Int32, UnsafePointer<CChar>, UInt32) -> Int32
        let symbol = try #require(dlsym(dlopen(nil, RTLD_NOW), "renameat2"), "glibc has renameat2")
        let renameat2 = unsafeBitCast(symbol, to: RenameAt2.self)
        // Held up while they are swapped: it reads the move's reports together.
        #expect(kill(agent.process.processIdentifier, SIGSTOP) == 0)
        #expect(renameat2(AT_FDCWD, playground.path + "/c1", AT_FDCWD, playground.path + "/c2", 2) == 0)
        #expect(kill(agent.process.processIdentifier, SIGCONT) == 0)
        try await eventually("the agent read the move") { agent.log.components(separatedBy: "error: cart c2: ").count >= 3 }
        try playground.writeAtomically("c1/cart.json", cartJSON([("A", 1)], syncedThrough: 1))
        try await eventually("c1's new version is notified in the folder at its name", timeout: 20) { !playground.records("c1/notifications.jsonl").isEmpty }
        #expect(playground.records("c2/notifications.jsonl").isEmpty, "nothing written into the folder swapped out")
        let stopped = agent.stop()
        #expect(stopped == 0, "\(agent.log)")
    }

    /// Many carts written broken in one wake-up (read together, in one commit) are each
    /// rejected once their version has stayed as it is, not only those read alone.
    @Test func cartsWrittenBrokenTogetherAreEachRejected() async throws {
        let playground = try tree()
        let ids = (1...6).map { "c\($0)" }
        // No window open: nothing else has the agent read them again.
        for id in ids {
            try mkdir(playground, id)
            try playground.writeAtomically("\(id)/cart.json", cartJSON([("A", 1)]))
        }
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        let agent = try AgentProcess(directory: playground.path)
        try await agent.waitUntilWatching()
        // Stopped while they are written: their events are read in one wake-up.
        #expect(kill(agent.process.processIdentifier, SIGSTOP) == 0)
        for id in ids { try playground.writeAtomically("\(id)/cart.json", "{\"products\": [") }
        #expect(kill(agent.process.processIdentifier, SIGCONT) == 0)
        try await eventually("every broken cart is rejected") {
            try basketSync(["-C", playground.path, "status"]).stdout.contains("carts with an error: \(ids.count)")
        }
        for id in ids { try await eventually("cart \(id)'s rejection is logged") { agent.log.contains("cart \(id): error: cart rejected: ") } }
        let stopped = agent.stop()
        #expect(stopped == 0, "\(agent.log)")
    }

    /// A cart's directory that is a link to another cart is never followed, whatever the
    /// command: shopper A's delta does not land in B's inbox (docs/spec.md §7).
    @Test func aCartDirectoryThatIsALinkIsRefusedByEveryCommand() throws {
        let playground = try tree()
        try mkdir(playground, "b")
        try playground.writeAtomically("b/cart.json", cartJSON([]))
        #expect(try basketSync(["-C", playground.path + "/b", "sync"]).status == 0)
        try FileManager.default.createSymbolicLink(atPath: playground.path + "/a", withDestinationPath: "b")
        for command in [["push", "X=+1"], ["sync"], ["status"], ["apply"], ["wait", "--timeout", "0"]] {
            let run = try basketSync(["-C", playground.path + "/a"] + command)
            #expect(run.status == 73 && run.stderr.contains("never followed through a link"), "\(command): \(run.status) \(run.stderr)")
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: playground.path + "/b/inbox/new").isEmpty, "nothing delivered to b")
    }

    /// `set-store` on the root is the default of every cart that never set its own.
    @Test func theRootsStoreIsTheDefaultOfCartsWithoutTheirOwn() throws {
        let playground = try tree()
        try mealzLine(playground, "a")
        try mealzLine(playground, "b")
        #expect(try basketSync(["-C", playground.path + "/b", "set-store", "own", "--mode", "retailer"]).status == 0)
        let set = try basketSync(["-C", playground.path, "set-store", "shop-1", "--mode", "retailer"])
        #expect(set.status == 0 && set.stdout.contains("default"), "\(set.stdout)\(set.stderr)")
        // status shows the store a cart follows before its next pass has taken it.
        let before = try basketSync(["-C", playground.path + "/a", "status", "--json"])
        #expect(before.stdout.contains("\"storeId\":\"shop-1\""), "\(before.stdout)")
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        // Each says where its store comes from: the tree's default, or its own.
        for (id, store, source, said) in [("a", "shop-1", "tree", "the tree's default, set on the root"), ("b", "own", "own", "this cart's own, set on it")] {
            let status = try basketSync(["-C", playground.path + "/" + id, "status", "--json"])
            let report = try JSONSerialization.jsonObject(with: Data(status.stdout.utf8)) as? [String: Any]
            #expect(report?["storeId"] as? String == store && report?["mode"] as? String == "retailer", "\(id): \(status.stdout)")
            #expect(report?["storeSource"] as? String == source, "\(id): \(status.stdout)")
            let human = try basketSync(["-C", playground.path + "/" + id, "status"])
            #expect(human.stdout.contains("store: \(store) (retailer mode), Mealz basket") && human.stdout.contains(said), "\(id): \(human.stdout)")
        }
        // A payment in a cart following the default is recorded against it.
        try playground.writeAtomically("a/cart.json", cartJSON([("A", 1)]))
        let paid = try basketSync(["-C", playground.path + "/a", "handle-payment", "--total", "3.00", "--order-id", "o-1"])
        #expect(paid.status == 0, "\(paid.stderr)")
        #expect(playground.records("a/payments.jsonl").last?["storeId"] as? String == "shop-1")
    }

    /// A start takes the tree's default store into a cart that never set its own, though the
    /// cart did not change since it was last read (a start takes no step on a cart with nothing
    /// else to do: the default is something to do).
    @Test func aStartTakesTheRootsStoreIntoACartThatDidNotChange() async throws {
        let playground = try tree()
        try mkdir(playground, "a")
        try playground.writeAtomically("a/cart.json", cartJSON([("X", 1)], syncedThrough: 0))
        try mealzLine(playground, "a")
        // Read well after it was written: the cart is then known as certainly that version.
        let written = try FileManager.default.attributesOfItem(atPath: playground.path + "/a/cart.json")[.modificationDate] as? Date ?? Date()
        try await eventually("a second passed since the cart was written") { Date().timeIntervalSince(written) > 1.2 }
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        #expect(try basketSync(["-C", playground.path, "set-store", "shop-1", "--mode", "retailer"]).status == 0)
        #expect(playground.keptValue("state", cart: "a")?.contains("\"storeId\":\"shop-1\"") == false, "not taken before a step")
        let agent = try AgentProcess(directory: playground.path)
        try await agent.waitUntilWatching()
        let kept = playground.keptValue("state", cart: "a") ?? ""
        #expect(kept.contains("\"storeId\":\"shop-1\"") && kept.contains("\"mode\":\"retailer\""), "\(kept)")
        #expect(agent.stop() == 0)
    }

    /// `wait` on the root does not list a cart whose cart claims beyond its outbox (its apply
    /// refuses, 74) but says it, and serves the others; left alone with it, it times out naming
    /// it; `apply` on the root reports it failed (74) and applies the others. The claim made
    /// honest, the cart is listed again.
    @Test func waitOnTheRootLeavesOutACartClaimingBeyondItsOutbox() throws {
        let playground = try tree()
        for id in ["a", "b"] {
            try mkdir(playground, id)
            try playground.write("\(id)/cart.json", cartJSON([("X", 1)], syncedThrough: 0))
            #expect(try basketSync(["-C", playground.path + "/" + id, "push", "A=+1"]).status == 0)
        }
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        try playground.writeAtomically("a/cart.json", cartJSON([("X", 1)], syncedThrough: 9))
        let found = try basketSync(["-C", playground.path, "wait", "--timeout", "0"])
        #expect(found.status == 0 && found.stdout == "{\"cart\":\"b\",\"after\":0,\"through\":1}\n", "\(found)")
        let refusal = "cart a: warning: its records are not listed: \(playground.path)/a/cart.json: says \"syncedThrough\" 9, beyond the outbox's last record (1)"
        #expect(found.stderr.contains(refusal), "\(found.stderr)")
        let applied = try basketSync(["-C", playground.path, "apply"])
        #expect(applied.status == 74 && applied.stdout.hasPrefix("b: applied 1 updateBasket record(s)") && applied.stderr.contains("cart a: \(playground.path)/a/cart.json: says \"syncedThrough\" 9"), "\(applied)")
        let alone = try basketSync(["-C", playground.path, "wait", "--timeout", "0"])
        #expect(alone.status == 75 && alone.stdout.isEmpty && alone.stderr.contains(refusal) && alone.stderr.contains("no cart has records to apply within 0 s but 1 whose records are refused (said above: a)"), "\(alone)")
        try playground.writeAtomically("a/cart.json", cartJSON([("X", 1)], syncedThrough: 0))
        let both = try basketSync(["-C", playground.path, "wait", "--timeout", "0"])
        #expect(both.stdout.contains("{\"cart\":\"a\",\"after\":0,\"through\":1}"), "\(both)")
    }

    /// `wait` on the root lists the carts with records after their host's progress, one JSON
    /// line each, and blocks (one process) until there is one; `apply` on the root serves each.
    @Test func waitAndApplyOnTheRootServeEveryCart() async throws {
        let playground = try tree()
        for id in ["a", "b", "c"] {
            try mkdir(playground, id)
            try playground.write("\(id)/cart.json", cartJSON([("X", 1)], syncedThrough: 0))
        }
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        let none = try basketSync(["-C", playground.path, "wait", "--timeout", "0"])
        #expect(none.status == 75 && none.stdout.isEmpty, "\(none)")
        #expect(try basketSync(["-C", playground.path + "/b", "push", "A=+2"]).status == 0)
        #expect(try basketSync(["-C", playground.path + "/c", "push", "B=+1"]).status == 0)
        #expect(try basketSync(["-C", playground.path + "/c", "push", "B=+1"]).status == 0)
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        let found = try basketSync(["-C", playground.path, "wait", "--timeout", "0"])
        #expect(found.status == 0)
        #expect(found.stdout == "{\"cart\":\"b\",\"after\":0,\"through\":1}\n{\"cart\":\"c\",\"after\":0,\"through\":2}\n", "\(found)")
        // c's host applied its first record its own way: it is listed after it.
        try playground.writeAtomically("c/cart.json", cartJSON([("X", 1), ("B", 1)], syncedThrough: 1))
        #expect(try basketSync(["-C", playground.path, "wait", "--timeout", "0"]).stdout.contains("{\"cart\":\"c\",\"after\":1,\"through\":2}"))
        let applied = try basketSync(["-C", playground.path, "apply", "--json"])
        #expect(applied.status == 0, "\(applied)")
        #expect(applied.stdout.split(separator: "\n").map { String($0.prefix(while: { $0 != "," })) } == ["{\"cart\":\"b\"", "{\"cart\":\"c\""], "\(applied.stdout)")
        #expect(playground.read("c/cart.json").contains("{\"id\":\"B\",\"quantity\":2}"), "c's second record alone applied: \(playground.read("c/cart.json"))")
        #expect(try basketSync(["-C", playground.path, "wait", "--timeout", "0"]).status == 75)
        #expect(try basketSync(["-C", playground.path, "wait", "--after", "1"]).status == 64)
        // Blocking: one process wakes for the cart that gets a record.
        let waiting = try startedInBackground(["-C", playground.path, "wait", "--timeout", "600"], output: playground.path + "/waited")
        defer { if waiting.isRunning { kill(waiting.processIdentifier, SIGKILL) } }
        try await eventually("wait sleeps") { sleepsInPoll(waiting) }
        #expect(try basketSync(["-C", playground.path + "/a", "push", "C=+1"]).status == 0)
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        try await eventually("wait lists cart a") { !waiting.isRunning }
        #expect(waiting.terminationStatus == 0)
        #expect(playground.read("waited") == "{\"cart\":\"a\",\"after\":0,\"through\":1}\n")
    }

    /// `apply` on the root: a cart that fails is named with its own file (its folder, pinned while
    /// it was served, is closed before the failures are printed: another cart's folder may have
    /// its descriptor's number by then), and when every cart with records fails, nothing says
    /// there was nothing to apply.
    @Test func applyOnTheRootNamesEachFailingCartsOwnFile() throws {
        let playground = try tree()
        let ids = ["a", "b", "c", "d", "e"]
        for id in ids {
            try mkdir(playground, id)
            try playground.write("\(id)/cart.json", cartJSON([("X", 1)], syncedThrough: 0))
            #expect(try basketSync(["-C", playground.path + "/" + id, "push", "A=+1"]).status == 0)
        }
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        for id in ["b", "d"] { try playground.write("\(id)/cart.json", "{\"products\":[\n") }
        let applied = try basketSync(["-C", playground.path, "apply"])
        #expect(applied.status == 65, "\(applied)")
        for id in ["b", "d"] {
            let said = applied.stderr.split(separator: "\n").filter { $0.hasPrefix("basket-sync: cart \(id): ") }
            #expect(said.count == 1 && said[0].contains(playground.path + "/\(id)/cart.json:2:1"), "cart \(id) named by its own file: \(applied.stderr)")
            for other in ids where other != id { #expect(!said.contains { $0.contains("/\(other)/") }, "cart \(id) said with cart \(other)'s path: \(applied.stderr)") }
        }
        for id in ["a", "c", "e"] { #expect(applied.stdout.contains("\(id): applied 1 updateBasket record(s)"), "\(applied.stdout)") }
        // Only failing carts have records left: the failures are said, not "nothing to apply".
        let again = try basketSync(["-C", playground.path, "apply"])
        #expect(again.status == 65 && !again.stdout.contains("nothing to apply") && again.stdout.contains("2 cart(s)"), "\(again)")
    }

    /// `sync` on the root: one pass over every cart, for a cron host.
    @Test func syncOnTheRootPassesOverEveryCart() throws {
        let playground = try tree()
        for id in ["a", "b", "c"] {
            try mkdir(playground, id)
            try playground.writeAtomically("\(id)/cart.json", cartJSON([("X", 1)]))
        }
        try mealzLine(playground, "b")
        try mkdir(playground, "bad")
        try playground.write("bad/cart.json", "not json")
        let sync = try basketSync(["-C", playground.path, "sync"])
        #expect(sync.status == 65, "one cart rejected: \(sync.stdout)\(sync.stderr)")
        for id in ["a", "b", "c"] { #expect(notified(playground, id).count == 1, "\(id)") }
        #expect(playground.records("b/outbox.jsonl").count == 1)
        #expect(sync.stdout.contains("4 carts") && sync.stderr.contains("bad/cart.json:1:1"), "\(sync.stdout)\(sync.stderr)")
    }

    /// SIGKILL the tree's agent at random instants while events flow into many carts and their
    /// carts change: in every cart nothing acknowledged is lost, nothing is doubled, seq is contiguous.
    @Test func killedWhileEventsFlowInManyCartsNothingIsLostOrDoubled() async throws {
        let carts = 50
        let kills = Knobs.value("BASKET_SYNC_TREE_KILLS", default: 25)
        let seed = Knobs.seed
        var rng = SplitMix64(seed: seed)
        let playground = try tree()
        for cart in 0..<carts {
            try mkdir(playground, "c\(cart)/inbox/tmp")
            try mkdir(playground, "c\(cart)/inbox/new")
        }
        var delivered: [Int: Int] = [:]
        for round in 0..<kills {
            let agent = try AgentProcess(directory: playground.path)
            for _ in 0..<Int.random(in: 5...20, using: &rng) {
                let cart = Int.random(in: 0..<carts, using: &rng)
                let n = delivered[cart, default: 0]
                let name = "e\(n).crash"
                try playground.write("c\(cart)/inbox/tmp/\(name)", "{\"id\":\"e\(n)\",\"type\":\"basketDelta\",\"products\":[{\"id\":\"S\(n % 3)\",\"quantity\":1}]}\n")
                try FileManager.default.moveItem(at: playground.url("c\(cart)/inbox/tmp/\(name)"), to: playground.url("c\(cart)/inbox/new/\(name)"))
                delivered[cart] = n + 1
            }
            let changed = Int.random(in: 0..<carts, using: &rng)
            try playground.writeAtomically("c\(changed)/cart.json", cartJSON([("S0", round % 4), ("X", 1)], syncedThrough: playground.records("c\(changed)/outbox.jsonl").count))
            // Slept without holding a thread of the test pool (other suites' waits need it).
            try await Task.sleep(nanoseconds: UInt64.random(in: 0...60_000_000, using: &rng))
            #expect(agent.stop(SIGKILL) == SIGKILL)
            for cart in 0..<carts { checkCart(playground, "c\(cart)", context: "seed \(seed) (replay: BASKET_SYNC_SEED=\(seed)), after kill \(round + 1)") }
        }
        let sync = try basketSync(["-C", playground.path, "sync"])
        #expect(sync.status == 0, "\(sync.stderr)")
        for cart in 0..<carts {
            checkCart(playground, "c\(cart)", context: "seed \(seed), after the final sync")
            let sources = Set(playground.records("c\(cart)/outbox.jsonl").compactMap { $0["source"] as? String })
            #expect(sources == Set((0..<delivered[cart, default: 0]).map { "e\($0)" }), "seed \(seed): cart c\(cart) has every event once")
            #expect(playground.names("c\(cart)/inbox/new").isEmpty)
        }
    }

    /// What must hold in one cart at any instant, even right after a kill (CrashTests' checks).
    func checkCart(_ playground: Playground, _ id: String, context: String) {
        checkCrashInvariants(playground, in: id, context: context)
    }
}

extension TreeTests {
    /// A tree whose database lost its carts (restored from an older backup, or gone): the refusal
    /// names the lost database (not "copied in"), `status` lists the cart as an error, `init
    /// --tree` refuses (73) and `init --tree --adopt` adopts every such cart, whose taken events
    /// stay taken.
    @Test func aTreeThatLostItsDatabaseSaysSoAndAdoptsItsCartsOnlyWhenAsked() throws {
        let playground = try tree()
        let backup = playground.path + "/../" + UUID().uuidString
        #expect(try basketSync(["-a", playground.path + "/.basket-sync", backup], executable: "/bin/cp").status == 0)
        defer { try? FileManager.default.removeItem(atPath: backup) }
        for id in ["e1", "e2"] {
            #expect(try basketSync(["-C", playground.path + "/c1", "push", "--id", id, "A=+1"]).status == 0)
        }
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        #expect(playground.read("c1/outbox.jsonl").split(separator: "\n").count == 2)
        // The database restored from a backup older than the cart.
        try FileManager.default.removeItem(atPath: playground.path + "/.basket-sync")
        #expect(try basketSync(["-a", backup, playground.path + "/.basket-sync"], executable: "/bin/cp").status == 0)
        let sync = try basketSync(["-C", playground.path + "/c1", "sync"])
        #expect(sync.status == 73 && sync.stderr.contains("or the tree's database lost it"), "\(sync.status) \(sync.stderr)")
        let status = try basketSync(["-C", playground.path, "status"])
        #expect(status.stdout.contains("carts with an error: 1") && status.stdout.contains("c1: "), "\(status.stdout)")
        // The database gone: commands say so (and advise init --tree --adopt), init --tree refuses,
        // --adopt takes the cart with its records.
        try FileManager.default.removeItem(atPath: playground.path + "/.basket-sync")
        for directory in [playground.path, playground.path + "/c1"] {
            let gone = try basketSync(["-C", directory, "sync"])
            #expect(gone.status == 66 && gone.stderr.contains("the tree's database is gone") && gone.stderr.contains("init --tree --adopt"), "\(gone.stderr)")
        }
        let refused = try basketSync(["-C", playground.path, "init", "--tree"])
        #expect(refused.status == 73 && refused.stderr.contains("init --tree --adopt"), "\(refused.status) \(refused.stderr)")
        #expect(!FileManager.default.fileExists(atPath: playground.path + "/.basket-sync/state.db"), "nothing made")
        let adopted = try basketSync(["-C", playground.path, "init", "--tree", "--adopt"])
        #expect(adopted.status == 0 && adopted.stdout.contains("c1/outbox.jsonl: adopted 2 records, going on after 2"), "\(adopted.stdout) \(adopted.stderr)")
        #expect(try basketSync(["-C", playground.path + "/c1", "push", "--id", "e2", "A=+1"]).status == 0)
        #expect(try basketSync(["-C", playground.path + "/c1", "push", "--id", "e3", "A=+1"]).status == 0)
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        let sources = playground.records("c1/outbox.jsonl").map { "\($0["seq"] ?? "?"):\($0["source"] ?? "?")" }
        #expect(sources == ["1:e1", "2:e2", "3:e3"], "e2 delivered again is not done again: \(sources)")
    }
}

extension TreeTests {
    /// `init --tree --adopt` does not stop at the first cart it cannot adopt: each cart is
    /// adopted on its own; the failures are
    /// named (73), and a second run once they are mended adopts them.
    @Test func adoptingATreeAdoptsEveryCartItCanAndNamesTheOthers() throws {
        let playground = try tree()
        for id in ["c1", "c2", "c3"] {
            #expect(try basketSync(["-C", playground.path + "/" + id, "push", "--id", id + "-1", "A=+1"]).status == 0)
        }
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        try FileManager.default.removeItem(atPath: playground.path + "/.basket-sync")
        try FileManager.default.moveItem(atPath: playground.path + "/c2/notifications.jsonl", toPath: playground.path + "/c2.notifications")
        try FileManager.default.createDirectory(atPath: playground.path + "/c2/notifications.jsonl", withIntermediateDirectories: false)
        let first = try basketSync(["-C", playground.path, "init", "--tree", "--adopt"])
        #expect(first.status == 73 && first.stderr.contains("1 cart(s) not adopted — cart c2:"), "\(first.status) \(first.stderr)")
        #expect(first.stderr.contains("c1/outbox.jsonl: adopted 1 records") && first.stderr.contains("c3/outbox.jsonl: adopted 1 records"), "\(first.stderr)")
        try FileManager.default.removeItem(atPath: playground.path + "/c2/notifications.jsonl")
        try FileManager.default.moveItem(atPath: playground.path + "/c2.notifications", toPath: playground.path + "/c2/notifications.jsonl")
        let second = try basketSync(["-C", playground.path, "init", "--tree", "--adopt"])
        #expect(second.status == 0 && second.stdout.contains("c2/outbox.jsonl: adopted 1 records") && !second.stdout.contains("c1/"), "\(second.stdout) \(second.stderr)")
        let status = try basketSync(["-C", playground.path, "status"])
        #expect(status.stdout.hasPrefix("tree \(playground.path): 3 carts") && status.stdout.contains("carts with an error: none"), "\(status.stdout)")
    }
}

extension TreeTests {
    /// `sync` on a tree's root runs many carts' passes in one transaction; each cart must end as
    /// its own pass alone would leave it. Two identical trees, made from a seed: carts with no
    /// event, a few, more than one group of events, a bad event, a duplicate, a cart that
    /// acknowledges, one that is broken, one missing, one whose outbox is a directory (its pass
    /// fails). One tree by `sync` on its root, the other by `sync` on each cart: every cart's
    /// records, filed and set-aside events, and outcome, the same.
    @Test func aFirstPassOverManyCartsDoesWhatEachCartsOwnPassDoes() throws {
        let seed = Knobs.seed
        var rng = SplitMix64(seed: seed)
        let context = "seed \(seed) (replay: BASKET_SYNC_SEED=\(seed))"
        let grouped = try tree(), alone = try tree()
        var ids: [String] = []
        for index in 0..<40 {
            let id = String(format: "c%02d", index)
            ids.append(id)
            var files: [(String, String)] = []
            let events = index == 7 ? 300 : Int(rng.next() % 4)
            for event in 0..<events {
                let name = "1764633600.M\(String(format: "%06d", event))P1Q\(event).test"
                let quantity = Int(rng.next() % 3) + 1
                let body = rng.next() % 9 == 0 ? "{not json" : "{\"id\":\"\(id)-e\(event % (rng.next() % 7 == 0 ? 1 : 1_000))\",\"type\":\"basketDelta\",\"products\":[{\"id\":\"P\(rng.next() % 4)\",\"quantity\":\(quantity)}]}"
                files.append(("inbox/new/\(name)", body))
            }
            switch rng.next() % 5 {
            case 0: break  // no cart yet
            case 1: files.append(("cart.json", "{\"products\":[{\"id\":\"P1\",\"quantity\":2}"))  // broken
            case 2: files.append(("cart.json", cartJSON([("P\(rng.next() % 4)", Int(rng.next() % 5))], syncedThrough: Int(rng.next() % 3))))
            default: files.append(("cart.json", cartJSON([("P0", 1), ("P2", Int(rng.next() % 4))], syncedThrough: 0)))
            }
            let broken = index == 13
            for playground in [grouped, alone] {
                try mkdir(playground, "\(id)/inbox/tmp")
                try mkdir(playground, "\(id)/inbox/new")
                for (path, text) in files { try playground.write("\(id)/\(path)", text) }
                if broken { try mkdir(playground, "\(id)/outbox.jsonl") }
            }
        }
        let root = try basketSync(["-C", grouped.path, "sync", "--json"])
        var outcomes: [String: String] = [:]
        for id in ids {
            let run = try basketSync(["-C", alone.path + "/" + id, "sync"])
            outcomes[id] = run.status == 0 || run.status == 65 ? "pass" : "failed"
        }
        let report = try #require(try JSONSerialization.jsonObject(with: Data(root.stdout.utf8)) as? [String: Any], "\(context): \(root.stdout) \(root.stderr)")
        let carts = (report["carts"] as? [[String: Any]]) ?? []
        #expect(carts.count == ids.count, "\(context): every cart reported")
        for cart in carts {
            let id = cart["cart"] as? String ?? "?"
            #expect((cart["error"] == nil ? "pass" : "failed") == outcomes[id], "\(context): \(id) \(cart)")
        }
        /// A record as a host reads it, without what differs between two runs (its id, its time).
        func records(_ playground: Playground, _ path: String) -> [String] {
            playground.records(path).map { record in
                let kept = record.filter { $0.key != "id" && $0.key != "at" }
                return String(decoding: (try? JSONSerialization.data(withJSONObject: kept, options: .sortedKeys)) ?? Data(), as: UTF8.self)
            }
        }
        for id in ids {
            for file in ["outbox.jsonl", "notifications.jsonl", "payments.jsonl"] where id != "c13" || file != "outbox.jsonl" {
                #expect(records(grouped, "\(id)/\(file)") == records(alone, "\(id)/\(file)"), "\(context): \(id)/\(file)")
            }
            for folder in ["inbox/new", "inbox/cur", "inbox/bad"] {
                #expect(grouped.names("\(id)/\(folder)") == alone.names("\(id)/\(folder)"), "\(context): \(id)/\(folder)")
            }
        }
        // What each file was given is written down as the file is (a new cart's empty files
        // noted in the group's transaction): the next pass finds every file as given, with
        // nothing to read back.
        for id in ids where outcomes[id] == "pass" {
            for projection in ["outbox", "notifications", "payments"] {
                let fields = grouped.keptValue("given.\(projection)", cart: id).map { $0.split(separator: " ").map(String.init) } ?? []
                let file = try FileManager.default.attributesOfItem(atPath: "\(grouped.path)/\(id)/\(projection).jsonl")
                let lastSeq = grouped.records("\(id)/\(projection).jsonl").last.flatMap { $0["seq"] as? Int } ?? 0
                #expect(fields.count >= 4 && fields[1] == "\(file[.systemFileNumber] as? Int ?? -1)" && fields[2] == "\(file[.size] as? Int ?? -1)" && fields[3] == "\(lastSeq)",
                        "\(context): \(id)/\(projection).jsonl given \(fields), the file \(file[.systemFileNumber] ?? "?") of \(file[.size] ?? "?") bytes ending at record \(lastSeq)")
            }
        }
        #expect(grouped.names("c07/inbox/cur").count + grouped.names("c07/inbox/bad").filter { !$0.hasSuffix(".error") }.count == 300,
                "\(context): more than one group of events, all taken or set aside")
    }
}

/// A tree cart's byte of the writers' lock (`.basket-sync/projections.lock`), held by this
/// process as another basket-sync would hold it (an open-file-description lock), until released
/// or dropped.
final class HeldWritersLock {
    private let fd: Int32
    private let offset: off_t

    init(_ playground: Playground, cart id: String) throws {
        offset = off_t(try #require(Int64(playground.databaseRows("SELECT n FROM carts WHERE id = '\(id)'").first?.first ?? ""), "\(id) is a cart of the tree"))
        fd = open(playground.path + "/.basket-sync/projections.lock", O_RDWR | O_CLOEXEC)
        try #require(fd >= 0)
        try #require(lock(Int16(F_WRLCK)), "\(id)'s byte of the writers' lock taken")
    }

    deinit { close(fd) }

    /// Lets the lock go; whether it went.
    func release() -> Bool { lock(Int16(F_UNLCK)) }

    private func lock(_ type: Int16) -> Bool {
        var lock = flock()
        lock.l_type = type
        lock.l_whence = Int16(SEEK_SET)
        lock.l_start = offset
        lock.l_len = 1
        return fcntl(fd, 37 /* F_OFD_SETLK */, &lock) == 0
    }
}

extension TreeTests {
    /// However `-C` spells a cart of the tree (`ROOT/ID/.`, `ROOT/ID/inbox/..`, `ROOT/./ID/.`),
    /// it is that cart, checked as `ROOT/ID` is: a cart folder that is a link (out of the tree,
    /// or to another cart) is refused (73), and nothing is delivered through it.
    @Test(arguments: ["c1/.", "c1/inbox/..", "./c1/.", "c1//", "c9/../c1"])
    func everySpellingOfACartIsThatCart(spelling: String) throws {
        let playground = try tree()
        let outside = playground.path + "/../outside-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: outside + "/inbox/new", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: outside + "/inbox/tmp", withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: outside) }
        #expect(try basketSync(["-C", playground.path + "/c2", "push", "A=+1"]).status == 0)
        for (link, target) in [("c1", outside), ("c3", playground.path + "/c2")] {
            try FileManager.default.createSymbolicLink(atPath: playground.path + "/" + link, withDestinationPath: target)
            let run = try basketSync(["-C", playground.path + "/" + spelling.replacingOccurrences(of: "c1", with: link), "push", "B=+1"])
            #expect(run.status == 73, "\(spelling) → \(link): \(run.status) \(run.stderr)")
        }
        #expect(playground.names("../" + URL(fileURLWithPath: outside).lastPathComponent + "/inbox/new").isEmpty, "\(spelling): delivered outside the tree")
        #expect(playground.names("c2/inbox/new").count + playground.names("c2/inbox/cur").count == 1, "\(spelling): delivered into another cart")
    }
}

extension TreeTests {
    /// Descriptors are bounded by the limit, not by the carts: with room for 150 open files, a
    /// tree of 300 carts (an event and a cart each) is taken by one `sync` on its root, then
    /// served by an agent — each cart's folder is held open only while its engine is kept or
    /// its lines wait for their flush. Nothing fails for want of a descriptor, and a record
    /// pushed into the last cart arrives.
    @Test func aTreeOfManyCartsNeverRunsOutOfDescriptors() async throws {
        let playground = try tree()
        let ids = try cartsWithAnEvent(playground, count: 300, cart: cartJSON([("B", 1)], syncedThrough: 0))
        let limited = ["--nofile=150:150", "--", binary.path]
        let sync = try basketSync(limited + ["-C", playground.path, "sync"], executable: "/usr/bin/prlimit")
        #expect(sync.status == 0 && sync.stdout.contains("300 carts: 300 taken") && !sync.stderr.contains("Too many open files"), "\(sync.stdout) \(sync.stderr.prefix(500))")
        // New events everywhere, then an agent with the same limit.
        for id in ids { try playground.write("\(id)/inbox/new/1764633601.M1P1Q2.test", "{\"id\":\"\(id)-2\",\"type\":\"basketDelta\",\"products\":[{\"id\":\"A\",\"quantity\":1}]}") }
        let agent = try AgentProcess(directory: playground.path, descriptors: 150)
        try await agent.waitUntilWatching()
        #expect(try basketSync(["-C", playground.path + "/c300", "push", "--id", "late", "C=+1"]).status == 0)
        try await eventually("the pushed record arrives") { playground.read("c300/outbox.jsonl").contains("\"late\"") }
        // Each cart's second event taken (c300 has the pushed one too).
        try await eventually("every cart's second event is taken") { ids.allSatisfy { playground.names("\($0)/inbox/cur").count >= 2 } }
        #expect(agent.stop() == 0)
        #expect(!agent.log.contains("Too many open files") && !agent.log.contains("names another cart"), "\(agent.log.prefix(800))")
        // Room for a few dozen files only: still every cart, a few at a time.
        for id in ids { try playground.write("\(id)/inbox/new/1764633602.M1P1Q3.test", "{\"id\":\"\(id)-3\",\"type\":\"basketDelta\",\"products\":[{\"id\":\"A\",\"quantity\":1}]}") }
        let tight = try basketSync(["--nofile=48:48", "--", binary.path, "-C", playground.path, "sync"], executable: "/usr/bin/prlimit")
        #expect(tight.status == 0 && tight.stdout.contains("0 failed; inbox: 300 taken") && !tight.stderr.contains("Too many open files"), "\(tight.stdout) \(tight.stderr.prefix(500))")
    }

    /// Lines waiting for their flush hold their carts' folders open, so past a bound the agent
    /// flushes before it opens more: never inside a group's commit, where the note of what the
    /// flush made durable cannot be written. With room for 150 files and no flush due for an
    /// hour, 200 carts changed while the agent is stopped come in one wake-up: every cart is
    /// notified, and nothing is said to have failed.
    @Test func manyCartsChangedInOneWakeUpFlushOutsideTheirGroupsCommit() async throws {
        let playground = try tree()
        let ids = try cartsWithAnEvent(playground, count: 200, cart: cartJSON([("A", 1)], syncedThrough: 1))
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        #expect(ids.allSatisfy { notified(playground, $0).count == 1 })
        let agent = try AgentProcess(directory: playground.path, environment: ["BASKET_SYNC_FLUSH_SECONDS": "3600"], descriptors: 150)
        try await agent.waitUntilWatching()
        kill(agent.process.processIdentifier, SIGSTOP)
        for id in ids { try playground.writeAtomically("\(id)/cart.json", cartJSON([("A", 2)], syncedThrough: 1)) }
        kill(agent.process.processIdentifier, SIGCONT)
        try await eventually("every cart is notified again") { ids.allSatisfy { notified(playground, $0).count == 2 } }
        #expect(agent.stop() == 0)
        #expect(!agent.log.contains("failed") && !agent.log.contains("error"), "\(agent.log.prefix(1500))")
    }

    /// A cart's error in `sync` on the root names that cart's own folder: its folder's descriptor
    /// is another cart's by the time the summary is said, and the name is the one it had.
    @Test func aCartsErrorNamesItsOwnFolder() throws {
        let playground = try tree()
        for id in ["a", "b", "c"] { try mealzLine(playground, id) }
        try FileManager.default.removeItem(atPath: playground.path + "/a/inbox/bad")
        try playground.write("a/inbox/bad", "not a folder")
        let sync = try basketSync(["-C", playground.path, "sync", "--json"])
        let report = try #require(try JSONSerialization.jsonObject(with: Data(sync.stdout.utf8)) as? [String: Any], "\(sync.stdout) \(sync.stderr)")
        let error = ((report["carts"] as? [[String: Any]]) ?? []).first { $0["cart"] as? String == "a" }?["error"] as? String
        #expect(error?.hasPrefix(playground.path + "/a/inbox/bad:") == true, "\(error ?? "no error for a")")
        #expect(sync.stderr.contains("cart a: error: \(playground.path)/a/inbox/bad:"), "\(sync.stderr)")
    }
}

extension TreeTests {
    /// A cart's `inbox/` replaced by a link out of the tree (its owner may): the agent watches
    /// nothing through it — no inotify watch on a folder outside — and what is made out there
    /// wakes nothing: the cart's error is said once per retry, not once per file.
    @Test func anInboxLinkedOutOfTheTreeIsNeverWatched() async throws {
        let playground = try tree()
        let outside = playground.path + "/../outside-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: outside + "/new", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: outside + "/tmp", withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: outside) }
        #expect(try basketSync(["-C", playground.path + "/c1", "init"]).status == 0)
        try FileManager.default.removeItem(atPath: playground.path + "/c1/inbox")
        try FileManager.default.createSymbolicLink(atPath: playground.path + "/c1/inbox", withDestinationPath: outside)
        let agent = try AgentProcess(directory: playground.path)
        try await agent.waitUntilWatching()
        // The inodes the agent's inotify watches, from /proc: none of the outside folders.
        let outsideInodes = try ["", "/new", "/tmp"].map { try #require(FileManager.default.attributesOfItem(atPath: outside + $0)[.systemFileNumber] as? Int) }
        let fdinfo = ((try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(agent.process.processIdentifier)/fdinfo")) ?? []).flatMap { name in
            ((try? String(contentsOfFile: "/proc/\(agent.process.processIdentifier)/fdinfo/\(name)", encoding: .utf8)) ?? "").split(separator: "\n")
        }
        let watched = fdinfo.compactMap { line -> Int? in
            guard line.hasPrefix("inotify"), let field = line.split(separator: " ").first(where: { $0.hasPrefix("ino:") }) else { return nil }
            return Int(field.dropFirst(4), radix: 16)
        }
        #expect(!watched.isEmpty, "the agent watches the tree")
        #expect(Set(watched).isDisjoint(with: outsideInodes), "a folder outside the tree is watched: \(watched) vs \(outsideInodes)")
        let before = agent.log.split(separator: "\n").count
        for index in 0..<50 { try Data("x".utf8).write(to: URL(fileURLWithPath: outside + "/new/f\(index)")) }
        // A cart change wakes the cart (its own folder is watched): its pass fails, said once.
        try playground.write("c1/cart.json", cartJSON([("A", 1)], syncedThrough: 0))
        try await eventually("the cart's failure is said") { agent.log.contains("inbox") && agent.log.split(separator: "\n").count > before }
        for index in 0..<20 { try playground.write("c1/cart.json", cartJSON([("A", index)], syncedThrough: 0)); usleep(20_000) }
        usleep(300_000)
        let lines = agent.log.split(separator: "\n").count - before
        #expect(agent.stop() == 0)
        #expect(lines < 12, "one failure said per retry, not per wake-up: \(lines) lines\n\(agent.log.suffix(1500))")
    }
}

extension TreeTests {
    /// A tree's root named through a link of the user's (`-C /srv/shop`, a link to the real
    /// root), with and without a trailing slash: every command and the agent serve the tree, as
    /// they serve a sync directory named so; the links under the root stay never followed.
    @Test func aTreeNamedThroughALinkIsServed() async throws {
        let playground = try tree()
        try mealzLine(playground, "c1")
        let outside = try Playground()
        let link = outside.path + "/shop"
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: playground.path)
        try FileManager.default.createSymbolicLink(atPath: playground.path + "/c2", withDestinationPath: outside.path)
        for spelling in [link, link + "/"] {
            for command in [["sync"], ["status"], ["metrics"], ["wait", "--timeout", "0"]] {
                let run = try basketSync(["-C", spelling] + command)
                #expect(run.status == 0, "\(spelling) \(command): \(run.status) \(run.stderr)")
            }
        }
        #expect(playground.records("c1/outbox.jsonl").count == 1)
        #expect(!FileManager.default.fileExists(atPath: outside.path + "/inbox"), "the link under the root is no cart")
        let agent = try AgentProcess(directory: link)
        try await agent.waitUntilWatching()
        try mealzLine(playground, "c1")
        try await eventually("the agent through the link takes the event") { playground.records("c1/outbox.jsonl").count == 2 }
        #expect(agent.stop() == 0, "\(agent.log)")
    }
}

/// The tree tests that wait out a cart's writers' lock held by another process (seconds each),
/// serialized among themselves and run beside the rest of the tree suite.
@Suite(.serialized) struct TreeTestsHeldLocks: TreeSuite {
    /// The carts one wake-up finds changed are finished together: each cart's lines appended
    /// under its writers' lock, what the files of up to eight carts were given noted in one
    /// transaction before their locks are let go. Another process holding one cart's writers'
    /// lock holds up that cart alone and loses nothing: that cart gets no line while it is held,
    /// the carts before it are noted as their files stand, a cart changed meanwhile is served,
    /// and once the lock is let go every cart has its line once and every note says its file.
    @Test func aWakeUpsCartsAreNotedAsTheirFilesWhileAnotherProcessHoldsOneCartsLock() async throws {
        let playground = try tree()
        let ids = (1...10).map { String(format: "g%02d", $0) }
        let agent = try AgentProcess(directory: playground.path)
        try await agent.waitUntilWatching()
        // A Mealz line A in each cart, echoed by its host.
        for id in ids { try mealzLine(playground, id) }
        try await eventually("every cart's event is taken") { ids.allSatisfy { playground.records("\($0)/outbox.jsonl").count == 1 } }
        for id in ids { try playground.writeAtomically("\(id)/cart.json", cartJSON([("A", 1)], syncedThrough: 1)) }
        try await eventually("every cart is notified once") { ids.allSatisfy { notified(playground, $0).count == 1 } }
        /// Whether what `id`'s notifications.jsonl was given is noted as the file stands at `seq`.
        func notedAsItsFile(_ id: String, through seq: Int) throws -> Bool {
            let fields = playground.keptValue("given.notifications", cart: id).map { $0.split(separator: " ").map(String.init) } ?? []
            let file = try FileManager.default.attributesOfItem(atPath: "\(playground.path)/\(id)/notifications.jsonl")
            return fields.count >= 4 && fields[1] == "\(file[.systemFileNumber] as? Int ?? -1)" && fields[2] == "\(file[.size] as? Int ?? -1)" && fields[3] == "\(seq)"
        }
        // g10's byte of the writers' lock, held as another basket-sync would hold it.
        let held = try HeldWritersLock(playground, cart: "g10")
        // Stopped while the ten carts change: the agent finds them all in its next wake-up.
        let pid = agent.process.processIdentifier
        kill(pid, SIGSTOP)
        for id in ids { try playground.writeAtomically("\(id)/cart.json", cartJSON([("A", 2)], syncedThrough: 1)) }
        kill(pid, SIGCONT)
        try await eventually("the carts before g10 are notified") { ids.prefix(9).allSatisfy { notified(playground, $0).count == 2 } }
        #expect(notified(playground, "g10").count == 1, "g10 is given no line while another process holds its writers' lock")
        for id in ids.prefix(8) { #expect(try notedAsItsFile(id, through: 2), "\(id): noted with the first eight while g10 waits") }
        // The agent waits for no cart: another change is served while g10's lock is still held.
        try playground.writeAtomically("g05/cart.json", cartJSON([("A", 3)], syncedThrough: 1))
        try await eventually("g05 is notified again while g10's lock is held") { notified(playground, "g05").count == 3 }
        #expect(notified(playground, "g10").count == 1, "g10 still waits for its lock")
        #expect(agent.log.contains("another basket-sync process has held this cart's files"), "g10's wait is said: \(agent.log)")
        // Tried again every 2 s at most, but said as seldom as any failure: after 0, 0.5, 1.5,
        // 3.5 and 7.5 s — five times, where a line at each try would be six by then.
        try await eventually("g10's wait is said with a quiet delay of 8 s", timeout: 60) { agent.log.contains("said again in 8.0 s") }
        let said = agent.log.split(separator: "\n").filter { $0.contains("g10") && $0.contains("has held this cart's files") }
        #expect(said.count == 5, "\(said.joined(separator: "\n"))")
        #expect(held.release())
        try await eventually("every cart is notified again") { ids.allSatisfy { notified(playground, $0).count == ($0 == "g05" ? 3 : 2) } }
        for id in ids {
            let last = id == "g05" ? 3 : 2
            #expect(notified(playground, id).compactMap { $0["seq"] as? Int } == Array(1...last), "\(id): each record once, in order")
            #expect(try notedAsItsFile(id, through: last), "\(id)/notifications.jsonl noted as it stands")
        }
        #expect(agent.stop() == 0, "\(agent.log)")
    }

    /// A command waits a bounded time for a cart's writers' lock another process holds, then
    /// says that cart busy (75) and serves the others: `sync` on the root with one cart's lock
    /// held (waited for without end before, and every later cart with it).
    @Test func aCommandOnTheRootServesTheOtherCartsWhileOneCartsLockIsHeld() async throws {
        let playground = try tree()
        let ids = ["h1", "h2", "h3"]
        for id in ids {
            try mkdir(playground, "\(id)/inbox/tmp")
            try mkdir(playground, "\(id)/inbox/new")
        }
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        for id in ids { try mealzLine(playground, id) }
        let held = try HeldWritersLock(playground, cart: "h2")
        let run = try basketSync(["-C", playground.path, "sync"])
        #expect(run.status == 75, "\(run.stdout)\(run.stderr)")
        #expect(run.stderr.contains("h2") && run.stderr.contains("another basket-sync process has held this cart's files"), "\(run.stderr)")
        #expect(playground.records("h1/outbox.jsonl").count == 1 && playground.records("h3/outbox.jsonl").count == 1, "the other carts are served: \(run.stderr)")
        #expect(playground.records("h2/outbox.jsonl").isEmpty, "h2 waits for its lock")
        #expect(held.release())
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        #expect(playground.records("h2/outbox.jsonl").compactMap { $0["seq"] as? Int } == [1], "h2's record once, once its lock is let go")
    }

    /// `wait` on the root says a cart waiting only through the records a file holds: one
    /// committed while another process holds that cart's writers' lock is not said until its
    /// line is appended.
    @Test func theRootsWaitSaysOnlyRecordsWhoseLineIsAppended() async throws {
        let playground = try tree()
        try mkdir(playground, "w1/inbox/tmp")
        try mkdir(playground, "w1/inbox/new")
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        try mealzLine(playground, "w1")
        let held = try HeldWritersLock(playground, cart: "w1")
        let sync = try startedInBackground(["-C", playground.path + "/w1", "sync"])
        try await eventually("w1's record is committed") { playground.databaseRows("SELECT count(*) FROM outbox") == [["1"]] }
        #expect(playground.records("w1/outbox.jsonl").isEmpty, "its line waits for the lock")
        let early = try basketSync(["-C", playground.path, "wait", "--timeout", "0.5"])
        #expect(early.status == 75 && early.stdout.isEmpty, "nothing said before its line: \(early)")
        #expect(held.release())
        // Its own end (the line appended, or busy once it waited 10 s) is not what is tested: a
        // catch-up now writes the line if it did not.
        sync.waitUntilExit()
        #expect(try basketSync(["-C", playground.path + "/w1", "sync"]).status == 0)
        let later = try basketSync(["-C", playground.path, "wait", "--timeout", "10"])
        #expect(later.status == 0 && later.stdout.contains("\"cart\":\"w1\"") && later.stdout.contains("\"through\":1"), "\(later)")
    }

    /// `wait` on the root lists no cart its `apply` cannot read (its cart does not parse): that
    /// cart is said, the others listed; a host loop never gets a cart to fail on again and again.
    @Test func theRootsWaitLeavesOutACartThatCannotBeRead() async throws {
        let playground = try tree()
        for id in ["r1", "r2"] {
            try mkdir(playground, "\(id)/inbox/tmp")
            try mkdir(playground, "\(id)/inbox/new")
        }
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        for id in ["r1", "r2"] { try mealzLine(playground, id) }
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        try playground.write("r2/cart.json", "{\"products\": [\n")
        let both = try basketSync(["-C", playground.path, "wait", "--timeout", "10"])
        #expect(both.status == 0 && both.stdout.contains("\"cart\":\"r1\"") && !both.stdout.contains("\"cart\":\"r2\""), "\(both)")
        #expect(both.stderr.contains("cart r2: warning: its records are not listed") && both.stderr.contains("r2/cart.json:2:1"), "\(both.stderr)")
        #expect(try basketSync(["-C", playground.path + "/r1", "apply"]).status == 0)
        let none = try basketSync(["-C", playground.path, "wait", "--timeout", "0.5"])
        #expect(none.status == 75 && none.stdout.isEmpty, "r1 applied, r2 cannot be read: nothing to list: \(none)")
    }
}

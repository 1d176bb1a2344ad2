@testable import BasketSyncAgent
import Glibc
import Testing

/// What a polled tree cart's looks see when they go from its folder held open: changes in the
/// folder, the folder gone, a folder put under its name (once checked), and the bound on the
/// folders held.
@Suite struct PollerTests {
    /// A tree root with carts `ids`, each with a cart, a marker and `inbox/new/`.
    static func makeTree(_ ids: [String]) -> String {
        var template = Array("/tmp/poller-tests-XXXXXX".utf8CString)
        let root = String(cString: mkdtemp(&template)!)
        for id in ids { makeCart(root, id, version: 1) }
        return root
    }

    static func makeCart(_ root: String, _ id: String, version: Int) {
        for folder in ["", "/inbox", "/inbox/new"] { mkdir("\(root)/\(id)\(folder)", 0o755) }
        write("\(root)/\(id)/\(Layout.cartMarker)", "marker of \(id) \(version)\n")
        write("\(root)/\(id)/cart.json", "{\"products\":[{\"id\":\"A\",\"quantity\":\(version)}],\"syncedThrough\":0}\n")
    }

    static func write(_ path: String, _ text: String) {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        precondition(fd >= 0, "cannot write \(path)")
        _ = text.utf8CString.withUnsafeBufferPointer { Glibc.write(fd, $0.baseAddress, $0.count - 1) }
        close(fd)
    }

    /// Looks until a look says something (a changed cart is said once it stood still for one
    /// look), at most four looks, each `settle` seconds after the last.
    static func look(_ poller: Poller, from start: Double) -> Set<Watcher.Change> {
        var now = start
        for _ in 0..<4 {
            let seen = poller.changes(now: now, treeSignalled: false).kinds
            if !seen.isEmpty { return seen }
            now += Poller.settleSeconds + 1
        }
        return []
    }

    /// A cart folder renamed away whole and another made under its name: the held folder is
    /// still the old one (nothing changed there), and once checked the looks go to the folder
    /// the name gives — whose cart and marker differ.
    @Test func aFolderRenamedAwayIsLetGoOnceChecked() throws {
        let root = Self.makeTree(["c1"])
        defer { _ = system("rm -rf '\(root)'") }
        let pollRoot = try #require(PollRoot(root, folders: 4))
        let poller = Poller(directory: "\(root)/c1", cart: "cart.json", isTreeCart: true, root: pollRoot)
        #expect(pollRoot.foldersLeft == 3, "the cart's folder is held")
        #expect(rename("\(root)/c1", "\(root)/kept") == 0)
        Self.makeCart(root, "c1", version: 2)
        let start = Posix.monotonicSeconds() + 100
        #expect(Self.look(poller, from: start).isEmpty, "the held folder, renamed away, did not change")
        poller.checkFolder()
        #expect(pollRoot.foldersLeft == 3, "the old folder let go, the new one held")
        let seen = poller.changes(now: start + 100, treeSignalled: true).kinds
        #expect(seen.contains(.commit), "the new folder's marker is another: \(seen)")
        #expect(Self.look(poller, from: start + 200).contains(.cart) || seen.contains(.cart), "the new folder's cart is another: \(seen)")
    }

    /// A held folder removed: the look says the directory is gone.
    @Test func aHeldFolderRemovedIsSaidGone() throws {
        let root = Self.makeTree(["c1"])
        defer { _ = system("rm -rf '\(root)'") }
        let pollRoot = try #require(PollRoot(root, folders: 4))
        let poller = Poller(directory: "\(root)/c1", cart: "cart.json", isTreeCart: true, root: pollRoot)
        #expect(system("rm -rf '\(root)/c1'") == 0)
        #expect(poller.changes(now: Posix.monotonicSeconds() + 100, treeSignalled: false).kinds == [.directoryGone])
    }

    /// Past the root's share, carts are reached from the root and see the same changes; a
    /// poller gone gives its folder back.
    @Test func foldersHeldAreBoundedAndGivenBack() throws {
        let root = Self.makeTree(["c1", "c2"])
        defer { _ = system("rm -rf '\(root)'") }
        let pollRoot = try #require(PollRoot(root, folders: 1))
        var first: Poller? = Poller(directory: "\(root)/c1", cart: "cart.json", isTreeCart: true, root: pollRoot)
        let second = Poller(directory: "\(root)/c2", cart: "cart.json", isTreeCart: true, root: pollRoot)
        #expect(pollRoot.foldersLeft == 0)
        for id in ["c1", "c2"] {
            Self.write("\(root)/\(id)/cart.json.tmp", "{\"products\":[],\"syncedThrough\":0}\n")
            #expect(rename("\(root)/\(id)/cart.json.tmp", "\(root)/\(id)/cart.json") == 0)
        }
        let start = Posix.monotonicSeconds() + 100
        #expect(Self.look(first!, from: start) == [.cart], "held")
        #expect(Self.look(second, from: start) == [.cart], "from the root")
        #expect(Self.look(second, from: start + 100).isEmpty, "said once")
        first = nil
        #expect(pollRoot.foldersLeft == 1, "given back")
    }
}

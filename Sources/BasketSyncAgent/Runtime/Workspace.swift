import BasketSync
import BasketSyncWire

/// What a command's directory is (docs/spec.md §8): a sync directory — a tree of one cart, the
/// directory itself — a tree's root, or one cart of a tree. Every command and the agent start
/// from it: the agent serves a sync directory or a tree's root with one loop, `sync` and
/// `status` go over the carts of either.
public enum Workspace: Equatable, Sendable {
    /// One sync directory (or a directory that is not one yet).
    case directory
    /// The root of a tree of carts (its `basket-sync.json` says `"layout": "tree"`).
    case treeRoot
    /// Cart `id` of the tree at `root`.
    case treeCart(root: String, id: String)

    /// Where `directory` stands: a tree's root, one of its carts (a subdirectory named as a cart
    /// id), or a sync directory of its own.
    public static func of(_ directory: String) -> Workspace {
        // A cart's folder as opened (`/proc/self/fd/N/.`) is where it is known to be.
        let directory = PinnedNames.named(directory)
        // A cart of a tree first: nothing is made inside a tree but its carts, so a configuration
        // found in a cart's folder (copied there) is none of the cart's, never a tree's root.
        let root = Posix.dirname(of: directory)
        let id = String(directory[directory.index(after: directory.lastIndex(of: "/") ?? directory.startIndex)...])
        if root != directory, Tree.isCartId(id), AgentConfiguration.layoutIsTree(directory: root) {
            return .treeCart(root: root, id: id)
        }
        if AgentConfiguration.layoutIsTree(directory: directory) { return .treeRoot }
        return .directory
    }
}

extension Workspace {
    /// Whether `directory` is a cart of a tree that is made — under a folder holding
    /// `.basket-sync/`, a directory (not a link) holding its marker and its delivery folders —
    /// as anyone can tell without the tree's configuration (broken, or not this account's to
    /// read): a delivery into it needs nothing more.
    public static func isMadeTreeCart(_ directory: String) -> Bool {
        let directory = PinnedNames.named(directory)
        let root = Posix.dirname(of: directory)
        let id = Posix.basename(of: directory)
        guard root != directory, Tree.isCartId(id), Posix.info("\(root)/\(Layout.stateDirectory)", follow: false)?.kind == .directory else { return false }
        return isMade(root: root, id: id)
    }

    /// Whether the folder of cart `id` under `root` holds its marker (a regular file) and its
    /// delivery folders, looked at through the folder opened without following a link.
    static func isMade(root: String, id: String) -> Bool {
        let made = try? Posix.withPinnedFolders(base: root, relative: "\(id)/\(Layout.cartMarker)") { (marker) throws(AgentError) -> Bool in
            let folder = Posix.dirname(of: marker)
            return Posix.info(marker, follow: false)?.kind == .regular
                && ["inbox", "inbox/new", "inbox/tmp"].allSatisfy { Posix.info("\(folder)/\($0)", follow: false)?.kind == .directory }
        }
        return made == true
    }

    /// The nearest directory above `directory` that is a sync directory or a tree's root (it
    /// holds `.basket-sync/`), if any: nothing is made inside one but a tree's carts.
    static func enclosing(_ directory: String) -> String? {
        var current = Posix.dirname(of: directory)
        while true {
            if Posix.info("\(current)/\(Layout.stateDirectory)", follow: false)?.kind == .directory { return current }
            let up = Posix.dirname(of: current)
            if up == current || current == "." { return nil }
            current = up
        }
    }

    /// Refuses, before a command touches anything, a directory whose place cannot be told
    /// right: under a tree's root, a name that is not a cart id; under a sync directory or a
    /// tree whose `basket-sync.json` is broken, that file's error (78), not a guess.
    public static func check(_ directory: String) throws(AgentError) {
        let parent = Posix.dirname(of: directory)
        guard parent != directory, Posix.info("\(parent)/\(Layout.stateDirectory)", follow: false)?.kind == .directory else { return }
        // Its layout, as its owner's configuration says it (any account may need to know it:
        // the Mealz side's push); whether this account may use it is the command's to say.
        let configuration = try AgentConfiguration.loadFile(directory: parent, asItsOwner: true)
        let name = Posix.basename(of: directory)
        // A tree's root whose configuration lost its layout: said as such, not "not a sync directory".
        if !configuration.isTree, !Posix.exists("\(directory)/\(Layout.stateDirectory)"),
           let database = try? Database(directory: parent, create: false, readOnly: true),
           (try? database.withTransaction({ () throws(AgentError) in try database.isTree() })) == true {
            throw Database.layoutMismatch(parent, "the database is a tree's (basket-sync init --tree made it), but \"layout\" is not \"tree\" here; put \"layout\": \"tree\" back")
        }
        if configuration.isTree, !Tree.isCartId(name) {
            throw .usage("\(directory): \(JSONWriter.quoted(name)) is not a cart id of the tree \(parent) (\(Tree.idRule))")
        }
        // A cart's directory that is a link leads to another cart, or out of the tree: whoever
        // can write the root could send one shopper's deltas to another (docs/spec.md §7).
        if configuration.isTree, let info = Posix.info(directory, follow: false), info.kind != .directory {
            throw .refused("\(directory): is \(info.kind.name), not a directory: a tree's cart is a directory of its own, never followed through a link; if no one needs it there, move it away (the cart is made again where needed), else give the cart another id")
        }
    }
}

extension AgentConfiguration {
    /// Whether `directory/basket-sync.json` says `"layout": "tree"` (a file that cannot be read
    /// or parsed says nothing: the command that reads it reports it).
    static func layoutIsTree(directory: String) -> Bool {
        (try? loadFile(directory: directory, asItsOwner: true))?.isTree ?? false
    }
}

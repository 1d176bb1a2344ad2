import BasketSyncWire
import Glibc

/// A cart's small kept values — its state, its notes, what its files were given — in one row of
/// the table `kept`, read once a transaction and written once, just before its commit. A change
/// reads about fifteen of them and writes about eight: as `meta` rows of their own that was a
/// fifth of a change's instructions, SQLite's cost being by the row, whatever the statement.
/// The host cart (``MetaKey/hostCart``, ``MetaKey/hostCartChanges``), which a large cart makes
/// large, keeps its `meta` rows.
///
/// The row: entries one after the other, each the key's length (one byte), the key (UTF-8),
/// the value's length (four bytes, little-endian) and the value. A database written before
/// (layout 4) kept each value in a `meta` row of its own: a cart without a row in `kept` is
/// read from those, and they are deleted when its row is first written.
///
/// Nothing else writes these rows while a write transaction runs (`BEGIN IMMEDIATE`: one
/// writer), so the row under the image is what it was when the transaction began. A savepoint
/// rolled back takes back what its steps wrote in the image (an undo log), as SQLite takes back
/// its other rows; a transaction rolled back drops the images with it.
final class MetaImage {
    /// Where a key's value is.
    private enum Slot {
        case none
        /// In ``row``, not copied out.
        case inRow(Range<Int>)
        /// Written in the transaction (or read from a `meta` row of its own).
        case value([UInt8])
    }

    /// The row as read.
    private let row: [UInt8]
    /// Each key's value, by ``MetaKey/ordinal``.
    private var slots: [Slot]
    /// Whether a value was written in the transaction.
    var dirty = false
    /// Whether the cart's values were `meta` rows of their own when read (deleted when this is written).
    var fromRows = false

    init() {
        row = []
        slots = Array(repeating: .none, count: MetaKey.count)
    }

    /// A copy of `image` (a transaction's own, which it may write and roll back).
    init(copying image: MetaImage) {
        row = image.row
        slots = image.slots
        dirty = image.dirty
        fromRows = image.fromRows
    }

    /// The image of `row`, as ``encoded`` writes it; nil when it is not one.
    init?(row: [UInt8]) {
        self.row = row
        var slots = [Slot](repeating: .none, count: MetaKey.count)
        let found: Bool = row.withUnsafeBufferPointer { bytes in
            var at = 0
            var next = 0
            let count = bytes.count
            while at < count {
                let keyLength = Int(bytes[at])
                guard at + 1 + keyLength + 4 <= count else { return false }
                let keyStart = at + 1
                let lengthStart = keyStart + keyLength
                let length = Int(bytes[lengthStart]) | Int(bytes[lengthStart + 1]) << 8 | Int(bytes[lengthStart + 2]) << 16 | Int(bytes[lengthStart + 3]) << 24
                let valueStart = lengthStart + 4
                guard valueStart + length <= count else { return false }
                // Written in the order of the keys: the next one known is looked at first. A key
                // this version does not know is left out (it could not be asked for).
                if let ordinal = MetaKey.ordinal(of: UnsafeBufferPointer(rebasing: bytes[keyStart..<lengthStart]), from: next) {
                    slots[ordinal] = .inRow(valueStart..<(valueStart + length))
                    next = ordinal + 1
                }
                at = valueStart + length
            }
            return true
        }
        guard found else { return nil }
        self.slots = slots
    }

    /// The value of the key at `ordinal`.
    subscript(ordinal: Int) -> [UInt8]? {
        get {
            switch slots[ordinal] {
            case .none: return nil
            case let .inRow(range): return Array(row[range])
            case let .value(value): return value
            }
        }
        set { slots[ordinal] = newValue.map(Slot.value) ?? .none }
    }

    /// The row, keys in the order of ``MetaKey/all``.
    var encoded: [UInt8] {
        var encoded: [UInt8] = []
        encoded.reserveCapacity(row.count + 256)
        func entry(_ key: StaticString, _ value: UnsafeBufferPointer<UInt8>) {
            encoded.append(UInt8(key.utf8CodeUnitCount))
            encoded.append(contentsOf: UnsafeBufferPointer(start: key.utf8Start, count: key.utf8CodeUnitCount))
            let length = UInt32(value.count)
            encoded.append(UInt8(length & 0xFF))
            encoded.append(UInt8(length >> 8 & 0xFF))
            encoded.append(UInt8(length >> 16 & 0xFF))
            encoded.append(UInt8(length >> 24))
            encoded.append(contentsOf: value)
        }
        row.withUnsafeBufferPointer { rowBytes in
            for ordinal in 0..<MetaKey.count {
                switch slots[ordinal] {
                case .none: break
                case let .inRow(range): entry(MetaKey.all[ordinal].literal, UnsafeBufferPointer(rebasing: rowBytes[range]))
                case let .value(value): value.withUnsafeBufferPointer { entry(MetaKey.all[ordinal].literal, $0) }
                }
            }
        }
        return encoded
    }
}

/// What a savepoint rolled back puts back: a value and the image's mark as they were before a
/// write — or, with no ordinal (-1), an image read inside it, dropped (what it read may be what
/// the savepoint did to the table).
struct MetaUndo {
    let cart: Int64
    let ordinal: Int
    let value: [UInt8]?
    let dirty: Bool
}

extension MetaKey {
    /// Every key kept in a cart's row of values, in the order of ``ordinal``.
    static let all: [MetaKey] = [.state, .pendingRows, .deadline, .cartAtBatch, .cartVersions, .layoutBeforeCarts]
        + Projection.allCases.map { .given($0) } + Note.allCases.map { .note($0) }

    /// How many keys the row of values may hold.
    static let count = all.count

    /// Whether the key keeps a `meta` row of its own (the host cart: a large cart makes it large).
    var hasRowOfItsOwn: Bool { self == .hostCart || self == .hostCartChanges }

    /// The key's place in ``all`` (a key with a row of its own has none).
    var ordinal: Int {
        switch self {
        case .state: return 0
        case .pendingRows: return 1
        case .deadline: return 2
        case .cartAtBatch: return 3
        case .cartVersions: return 4
        case .layoutBeforeCarts: return 5
        case let .given(projection): return 6 + projection.tableNumber - 1
        case let .note(note): return 6 + Projection.allCases.count + Note.allCases.firstIndex(of: note)!
        case .hostCart, .hostCartChanges: preconditionFailure("\(text) has a row of its own")
        }
    }

    /// The ordinal of the key spelled `bytes`, if this version knows it: the keys from `first`
    /// on are compared first, then the others.
    static func ordinal(of bytes: UnsafeBufferPointer<UInt8>, from first: Int = 0) -> Int? {
        func matches(_ ordinal: Int) -> Bool {
            let key = all[ordinal].literal
            return key.utf8CodeUnitCount == bytes.count && (bytes.isEmpty || memcmp(key.utf8Start, bytes.baseAddress!, bytes.count) == 0)
        }
        return (first..<count).first(where: matches) ?? (0..<min(first, count)).first(where: matches)
    }
}

extension Database {
    /// The value of `cart`'s `key`: from the running transaction's image of the cart, read once
    /// in it; outside one, read now.
    func meta(_ cart: Int64, _ key: MetaKey) throws(AgentError) -> [UInt8]? {
        if key.hasRowOfItsOwn { return try readRow(cart, key.literal) }
        return try image(of: cart)[key.ordinal]
    }

    /// Sets (`value`) or removes (nil) `cart`'s `key`: in the running write transaction's image
    /// (written at its end), else in the row at once.
    func setMeta(_ cart: Int64, _ key: MetaKey, _ value: [UInt8]?) throws(AgentError) {
        if key.hasRowOfItsOwn { return try writeRow(cart, key.literal, value) }
        let image = try image(of: cart)
        let ordinal = key.ordinal
        if !savepointMarks.isEmpty { metaUndo.append(MetaUndo(cart: cart, ordinal: ordinal, value: image[ordinal], dirty: image.dirty)) }
        image[ordinal] = value
        image.dirty = true
        if !imagesWritable {
            // Written at once (outside a write transaction): read again next time, whatever
            // becomes of the transaction it may be in.
            committedImages[cart] = nil
            try write(image, of: cart)
        }
    }

    /// After every row of `cart` was deleted in the transaction: its image holds nothing either.
    func forgetMeta(of cart: Int64) {
        committedImages[cart] = nil
        guard let image = metaImages[cart] else { return }
        for ordinal in 0..<MetaKey.count {
            if !savepointMarks.isEmpty { metaUndo.append(MetaUndo(cart: cart, ordinal: ordinal, value: image[ordinal], dirty: image.dirty)) }
            image[ordinal] = nil
        }
        image.dirty = false
        image.fromRows = false
    }

    /// The image of `cart`: the running transaction's, read in it once; outside one, read now —
    /// from ``committedImages`` while no other process committed since.
    private func image(of cart: Int64) throws(AgentError) -> MetaImage {
        if usesMetaImages, let image = metaImages[cart] { return image }
        if !(usesMetaImages && committedImagesChecked) {
            let version = try dataVersion()
            if version != committedImagesVersion {
                committedImages.removeAll(keepingCapacity: true)
                committedImagesVersion = version
            }
            committedImagesChecked = usesMetaImages
        }
        if let kept = committedImages[cart] {
            guard usesMetaImages else { return kept }
            let image = MetaImage(copying: kept)
            metaImages[cart] = image
            return image
        }
        let image: MetaImage
        if let row = try readKept(cart) {
            guard let read = MetaImage(row: row) else { throw damaged(cart, "kept values (its state, notes) cannot be read") }
            image = read
        } else {
            // Written by layout 4 (a row each), or a cart with nothing kept yet.
            image = MetaImage()
            let statement = try cached("SELECT key, value FROM meta WHERE cart = ?")
            defer { statement.reset() }
            statement.bind(1, cart)
            while try statement.step() {
                let key = statement.blob(0)
                guard let ordinal = key.withUnsafeBufferPointer({ MetaKey.ordinal(of: $0) }) else { continue }
                image[ordinal] = statement.blob(1)
                image.fromRows = true
            }
        }
        if usesMetaImages {
            metaImages[cart] = image
            if !savepointMarks.isEmpty { metaUndo.append(MetaUndo(cart: cart, ordinal: -1, value: nil, dirty: false)) }
        }
        // Read outside a write transaction, it is what is committed; inside one, the
        // transaction may have changed the table under it already (a cart's rows deleted): it is
        // kept once committed (``keepCommittedImages()``).
        if !imagesWritable {
            if committedImages.count >= Self.committedImagesBound { committedImages.removeAll(keepingCapacity: true) }
            committedImages[cart] = usesMetaImages ? MetaImage(copying: image) : image
        }
        return image
    }

    /// After a commit: the transaction's images are what the table holds now.
    func keepCommittedImages() {
        for (cart, image) in metaImages {
            if committedImages.count >= Self.committedImagesBound { committedImages.removeAll(keepingCapacity: true) }
            committedImages[cart] = image
        }
    }

    /// Writes the images the running write transaction changed, just before its commit.
    func writeMetaImages() throws(AgentError) {
        for (cart, image) in metaImages where image.dirty { try write(image, of: cart) }
    }

    /// Writes `image` as `cart`'s row of values; the `meta` rows of each value a layout 4
    /// database kept go the first time.
    private func write(_ image: MetaImage, of cart: Int64) throws(AgentError) {
        if image.fromRows {
            for key in MetaKey.all { try writeRow(cart, key.literal, nil) }
            image.fromRows = false
        }
        let statement = try cached("INSERT INTO kept(cart, kept) VALUES(?, ?) ON CONFLICT(cart) DO UPDATE SET kept = excluded.kept")
        defer { statement.reset() }
        statement.bind(1, cart)
        statement.bind(2, image.encoded)
        _ = try statement.step()
        image.dirty = false
    }

    /// A savepoint rolled back: what its steps wrote in the images is taken back.
    func undoMeta(to mark: Int) {
        while metaUndo.count > mark {
            let undo = metaUndo.removeLast()
            if undo.ordinal < 0 {
                metaImages[undo.cart] = nil
                continue
            }
            guard let image = metaImages[undo.cart] else { continue }
            image[undo.ordinal] = undo.value
            image.dirty = undo.dirty
        }
    }

    /// The error of cart `cart`'s values found damaged (`what`), named by its id, with both ways
    /// out: a backup, or the database moved aside and made again from the files' records.
    func damaged(_ cart: Int64, _ what: String) -> AgentError {
        let named = cart == 0 ? "the sync directory's" : "cart \(((try? cartId(cart)) ?? nil).map { JSONWriter.quoted($0) } ?? "#\(cart)")'s"
        let directory = Posix.dirname(of: markerDirectory)
        return .database(path: databasePath, message: "\(named) \(what): the database is damaged; restore \(Layout.stateDirectory)/ from a backup, or move it aside (mv \(stateDirectory) \(stateDirectory).damaged) and make it again from the files' records with basket-sync -C \(directory) init \(cart == 0 ? "" : "--tree ")--adopt")
    }

    /// The id of cart `number` in a tree.
    func cartId(_ number: Int64) throws(AgentError) -> String? {
        let statement = try cached("SELECT id FROM carts WHERE n = ?")
        defer { statement.reset() }
        statement.bind(1, number)
        return try statement.step() ? statement.text(0) : nil
    }

    /// The sync id cart `number` was given when the tree took it on.
    func cartSyncId(_ number: Int64) throws(AgentError) -> String? {
        let statement = try cached("SELECT sync_id FROM carts WHERE n = ?")
        defer { statement.reset() }
        statement.bind(1, number)
        return try statement.step() ? statement.text(0) : nil
    }

    /// `cart`'s row of values, if it has one (a database of layout 4 read as it is has no table of them).
    private func readKept(_ cart: Int64) throws(AgentError) -> [UInt8]? {
        guard hasKeptTable else { return nil }
        let statement = try cached("SELECT kept FROM kept WHERE cart = ?")
        defer { statement.reset() }
        statement.bind(1, cart)
        return try statement.step() ? statement.blob(0) : nil
    }

    /// The `meta` row `key` of `cart` as the table holds it.
    private func readRow(_ cart: Int64, _ key: StaticString) throws(AgentError) -> [UInt8]? {
        let statement = try cached("SELECT value FROM meta WHERE cart = ? AND key = ?")
        defer { statement.reset() }
        statement.bind(1, cart)
        statement.bind(2, key)
        return try statement.step() ? statement.blob(0) : nil
    }

    /// Writes the `meta` row (nil: deletes it).
    private func writeRow(_ cart: Int64, _ key: StaticString, _ value: [UInt8]?) throws(AgentError) {
        guard let value else {
            let statement = try cached("DELETE FROM meta WHERE cart = ? AND key = ?")
            defer { statement.reset() }
            statement.bind(1, cart)
            statement.bind(2, key)
            _ = try statement.step()
            return
        }
        // One B-tree (WITHOUT ROWID) updated in place.
        let statement = try cached("INSERT INTO meta(cart, key, value) VALUES(?, ?, ?) ON CONFLICT(cart, key) DO UPDATE SET value = excluded.value")
        defer { statement.reset() }
        statement.bind(1, cart)
        statement.bind(2, key)
        statement.bind(3, value)
        _ = try statement.step()
    }
}

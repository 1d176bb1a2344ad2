@testable import BasketSyncAgent

import Testing
import TestSupport

/// The notes kept as numbers read back what was written, and read a field as Swift's own parse
/// does (a field it refuses is refused; a number that does not fit is not taken).
@Suite struct NoteNumbersTests {
    /// Random fields — digits, signs, letters, empty, the edges of 64 bits — each compared with
    /// `Int64(_:)` and `UInt64(_:)`; random lists of numbers written and read back.
    @Test func fieldsReadAsSwiftReadsThemAndNumbersComeBack() {
        let seed = Knobs.seed
        var random = SplitMix64(seed: seed)
        let pieces = ["0", "1", "9", "-", "+", "x", "00", "18446744073709551615", "18446744073709551616",
                      "9223372036854775807", "9223372036854775808", "-9223372036854775808", "-9223372036854775809", "٣", "1e3", " "]
        for _ in 0..<20_000 {
            let field = (0..<(1 + random.below(3))).map { _ in pieces[random.below(pieces.count)] }.joined()
            for piece in NoteNumbers.fields(field) {
                let text = String(decoding: piece, as: UTF8.self)
                #expect(NoteNumbers.int64(piece) == Int64(text), "seed \(seed): \(text.debugDescription) as Int64")
                #expect(NoteNumbers.uint64(piece) == UInt64(text), "seed \(seed): \(text.debugDescription) as UInt64")
            }
        }
        for _ in 0..<2_000 {
            let numbers = (0..<random.below(10)).map { _ in Int64(bitPattern: random.next()) >> Int64(random.below(64)) }
            let text = NoteNumbers.text(numbers)
            #expect(text == numbers.map(String.init).joined(separator: " "), "seed \(seed)")
            #expect(NoteNumbers.int64s(text) == numbers, "seed \(seed): \(text)")
        }
    }

    /// What a file was given comes back field for field, and a size past 63 bits is refused
    /// rather than trapped on.
    @Test func aCursorComesBackAndAnImpossibleSizeIsRefused() {
        let cursor = AppendCursor(device: UInt64.max, inode: 12, size: Int64.max, seq: 7, durable: 5, boot: "b00t-id", at: nil)
        #expect(AppendCursor(text: cursor.text) == cursor)
        #expect(cursor.text == "18446744073709551615 12 9223372036854775807 7 5 b00t-id")
        // When the note was made rides on the boot's field: a version before read it as another boot.
        let made = AppendCursor(device: 1, inode: 2, size: 3, seq: 7, durable: 5, boot: "b00t@id", at: 42)
        #expect(made.text == "1 2 3 7 5 b00t@id@42")
        #expect(AppendCursor(text: made.text)?.at == 42 && AppendCursor(text: made.text)?.boot == "b00t@id")
        #expect(AppendCursor(text: "1 2 3 7 5 b00t@id")?.boot == "b00t@id" && AppendCursor(text: "1 2 3 7 5 b00t@id")?.at == nil)
        #expect(AppendCursor(text: "1 2 9223372036854775808 7") == nil)
        #expect(AppendCursor(text: "1 2 3 7")?.durable == 7)
        #expect(AppendCursor(text: "1 2 3 x") == nil)
    }

    /// A flush's note covers a file's note of its file system and boot made at or before the
    /// flush began; the newest flush of each file system and boot is kept, the oldest lines go.
    @Test func aFlushNoteCoversWhatWasAppendedBeforeItBegan() {
        var note = FlushedNote.adding(nil, device: 7, boot: "b1", at: 100)
        #expect(FlushedNote.covers(note, device: 7, boot: "b1", at: 100))
        #expect(!FlushedNote.covers(note, device: 7, boot: "b1", at: 101))
        #expect(!FlushedNote.covers(note, device: 8, boot: "b1", at: 1))
        #expect(!FlushedNote.covers(note, device: 7, boot: "b2", at: 1))
        note = FlushedNote.adding(note, device: 7, boot: "b1", at: 200)
        #expect(FlushedNote.entries(note).count == 1 && FlushedNote.covers(note, device: 7, boot: "b1", at: 150))
        for device in 0..<UInt64(FlushedNote.kept + 4) { note = FlushedNote.adding(note, device: 100 + device, boot: "b2", at: 5) }
        #expect(FlushedNote.entries(note).count == FlushedNote.kept)
        #expect(!FlushedNote.covers(note, device: 7, boot: "b1", at: 150), "the oldest line went first")
        #expect(FlushedNote.covers(note, device: 100 + UInt64(FlushedNote.kept + 3), boot: "b2", at: 5))
    }

    /// The meta rows' keys are spelled once as literals: each note is `note.` and its name, each
    /// file's note `given.` and its projection, as rows written before were keyed.
    @Test func everyMetaKeyIsSpelledAsItsRowsWereKeyed() {
        for note in Note.allCases { #expect(MetaKey.note(note).text == "note.\(note.rawValue)") }
        for projection in Projection.allCases { #expect(MetaKey.given(projection).text == "given.\(projection.rawValue)") }
        let keys: [MetaKey] = [.state, .pendingRows, .hostCart, .hostCartChanges, .deadline, .cartAtBatch, .cartVersions, .layoutBeforeCarts]
        #expect(keys.map(\.text) == ["state", "pendingRows", "hostCart", "hostCartChanges", "deadline", "cartAtBatch", "cartVersions", "layoutBeforeCarts"])
    }
}

// The core needs only Foundation's value types (Date, Decimal). FoundationEssentials carries them
// without ICU, which keeps one-shot commands quick to start; it reads no file and no clock here.
#if canImport(FoundationEssentials)
@_exported import FoundationEssentials
#else
@_exported import Foundation
#endif

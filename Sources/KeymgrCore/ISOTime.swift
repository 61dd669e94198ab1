import Foundation

/// keymgr's one timestamp format for people and JSON: ISO 8601 UTC with milliseconds, `2026-11-23T10:00:00.000Z`,
/// the same text the store keeps (years 1 to 9999, so no date a server sends can trap).
public enum ISOTime {
    /// Formats `date` (clamped to the years 1 to 9999).
    public static func string(from date: Date) -> String { Timestamp.string(from: date) }

    /// Parses keymgr's format, or nil.
    public static func date(from text: String) -> Date? { Timestamp.date(from: text) }

    /// The instant `millis` milliseconds after 1970 (a server's epoch millis), or nil outside the years 1 to 9999.
    public static func date(milliseconds millis: Double) -> Date? { Timestamp.date(milliseconds: millis) }

    /// Milliseconds since 1970, the store's precision.
    public static func milliseconds(_ date: Date) -> Int64 { Timestamp.milliseconds(date) }
}

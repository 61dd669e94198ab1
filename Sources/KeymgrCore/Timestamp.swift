import Foundation

/// keymgr's one timestamp format: ISO 8601 UTC with milliseconds, `2026-11-23T10:00:00.000Z`.
///
/// Fixed width, so text order is time order in SQL; formatted by hand because `ISO8601DateFormatter`
/// is slow enough to dominate listing thousands of keys.
package enum Timestamp {
    /// The first and last instants the format can show: 0001-01-01T00:00:00.000Z and 9999-12-31T23:59:59.999Z.
    static let earliestMillis: Int64 = -62_135_596_800_000
    static let latestMillis: Int64 = 253_402_300_799_999

    /// Milliseconds since 1970, the store's precision, clamped to the years 1 to 9999
    /// (so any `Date`, however absurd its source, converts without trapping).
    package static func milliseconds(_ date: Date) -> Int64 {
        let millis = (date.timeIntervalSince1970 * 1000).rounded()
        guard millis.isFinite else { return millis > 0 ? latestMillis : earliestMillis }
        return Int64(min(max(millis, Double(earliestMillis)), Double(latestMillis)))
    }

    /// The instant `millis` milliseconds after 1970, or nil outside the years 1 to 9999.
    package static func date(milliseconds millis: Double) -> Date? {
        guard millis.isFinite, millis >= Double(earliestMillis), millis <= Double(latestMillis) else { return nil }
        return Date(timeIntervalSince1970: millis / 1000)
    }

    /// Formats `date` as `yyyy-MM-ddTHH:mm:ss.SSSZ` in UTC (clamped to the years 1 to 9999).
    package static func string(from date: Date) -> String {
        let clamped = min(max(date.timeIntervalSince1970 * 1000, Double(earliestMillis)), Double(latestMillis))
        let totalMillis = clamped.isFinite ? Int64(clamped.rounded(.down)) : earliestMillis
        var seconds = time_t(totalMillis.floorDiv(1000))
        let millis = Int(totalMillis - Int64(seconds) * 1000)
        var parts = tm()
        gmtime_r(&seconds, &parts)
        // Written in place (no array per field): `list` formats two of these per key.
        return String(unsafeUninitializedCapacity: 24) { out in
            func digits(_ value: Int, _ width: Int, at offset: Int) {
                var rest = value
                for index in stride(from: offset + width - 1, through: offset, by: -1) {
                    out[index] = UInt8(48 + rest % 10)
                    rest /= 10
                }
            }
            digits(Int(parts.tm_year) + 1900, 4, at: 0); out[4] = 45
            digits(Int(parts.tm_mon) + 1, 2, at: 5); out[7] = 45
            digits(Int(parts.tm_mday), 2, at: 8); out[10] = 84
            digits(Int(parts.tm_hour), 2, at: 11); out[13] = 58
            digits(Int(parts.tm_min), 2, at: 14); out[16] = 58
            digits(Int(parts.tm_sec), 2, at: 17); out[19] = 46
            digits(millis, 3, at: 20); out[23] = 90
            return 24
        }
    }

    /// Parses an ISO 8601 UTC timestamp: `yyyy-MM-ddTHH:mm:ss[.SSS]Z` or a bare date `yyyy-MM-dd` (midnight UTC).
    package static func date(from text: String) -> Date? {
        let bytes = Array(text.utf8)
        func number(_ start: Int, _ count: Int) -> Int? {
            guard start + count <= bytes.count else { return nil }
            var value = 0
            for byte in bytes[start..<(start + count)] {
                guard (48...57).contains(byte) else { return nil }
                value = value * 10 + Int(byte - 48)
            }
            return value
        }
        guard bytes.count >= 10, bytes[4] == 45, bytes[7] == 45,
              let year = number(0, 4), let month = number(5, 2), let day = number(8, 2),
              (1...12).contains(month), (1...31).contains(day)
        else { return nil }
        var hour = 0, minute = 0, second = 0, millis = 0
        if bytes.count > 10 {
            guard bytes.count >= 20, bytes[10] == 84 || bytes[10] == 116, bytes[13] == 58, bytes[16] == 58,
                  let h = number(11, 2), let m = number(14, 2), let s = number(17, 2),
                  h < 24, m < 60, s < 61
            else { return nil }
            (hour, minute, second) = (h, m, s)
            var index = 19
            if bytes[index] == 46 {
                index += 1
                var scale = 100
                while index < bytes.count, (48...57).contains(bytes[index]) {
                    millis += Int(bytes[index] - 48) * scale
                    scale /= 10
                    index += 1
                }
            }
            guard index == bytes.count - 1, bytes[index] == 90 || bytes[index] == 122 else { return nil }
        }
        var parts = tm()
        parts.tm_year = Int32(year - 1900)
        parts.tm_mon = Int32(month - 1)
        parts.tm_mday = Int32(day)
        parts.tm_hour = Int32(hour)
        parts.tm_min = Int32(minute)
        parts.tm_sec = Int32(second)
        let seconds = timegm(&parts)
        return Date(timeIntervalSince1970: TimeInterval(seconds) + TimeInterval(millis) / 1000)
    }
}

extension Int64 {
    fileprivate func floorDiv(_ divisor: Int64) -> Int64 {
        let quotient = self / divisor
        return (self % divisor != 0 && (self < 0) != (divisor < 0)) ? quotient - 1 : quotient
    }
}

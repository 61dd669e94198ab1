import ArgumentParser

/// The one check of every option that takes seconds (`--timeout` of every command, `--min-ttl`): a finite number
/// within the option's range. `inf`, `nan`, `1e30` and negative values are usage errors (64) here, before anything is
/// read or stored, never a crash where the seconds become an integer or a deadline.
enum DurationOption {
    /// The `--timeout` of every command that talks to a server or runs a verifier: more than 0, at most an hour.
    static let timeoutRange: ClosedRange<Double> = 0...3600

    /// Throws a `ValidationError` naming `option` unless `value` is finite and within `range` (above its lower bound
    /// when `exclusiveLower`).
    static func check(_ value: Double, _ option: String, within range: ClosedRange<Double> = timeoutRange,
                      exclusiveLower: Bool = true) throws {
        let aboveLower = exclusiveLower ? value > range.lowerBound : value >= range.lowerBound
        guard value.isFinite, aboveLower, value <= range.upperBound else {
            let lower = exclusiveLower ? "more than \(Self.seconds(range.lowerBound))" : "\(Self.seconds(range.lowerBound)) or more"
            throw ValidationError("\(option) must be a number of seconds, \(lower) and at most \(Self.seconds(range.upperBound))")
        }
    }

    private static func seconds(_ value: Double) -> String {
        value == value.rounded() ? String(Int(value)) : String(value)
    }
}

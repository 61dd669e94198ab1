/// Hex helpers for the crypto tests' known-answer vectors.
enum CryptoHex {
    /// The bytes of a hex string (whitespace ignored); crashes the test on a typo, which is what a test wants.
    static func bytes(_ hex: String) -> [UInt8] {
        let digits = Array(hex.filter { !$0.isWhitespace }.utf8)
        precondition(digits.count % 2 == 0, "odd-length hex")
        return stride(from: 0, to: digits.count, by: 2).map { index in
            UInt8(String(decoding: digits[index..<index + 2], as: UTF8.self), radix: 16)!
        }
    }

    /// Lower-case hex of `bytes`.
    static func string(_ bytes: [UInt8]) -> String {
        bytes.map { byte in
            let text = String(byte, radix: 16)
            return text.count == 1 ? "0" + text : text
        }.joined()
    }
}

import XCTest

final class PlaceholderKeyManagerTests: XCTestCase {}

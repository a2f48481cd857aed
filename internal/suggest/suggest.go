// Package suggest answers a misspelt name (a flag, a scenario key, a
// configuration key) with the one it was most likely meant as.
package suggest

// Nearest is the candidate at most two edits from name, and at most half
// its length, if exactly one is nearest; "" otherwise: never a guess
// between two.
func Nearest(name string, candidates []string) string {
	best, bestEdits, ties := "", 3, 0
	for _, c := range candidates {
		switch d := editDistance(name, c); {
		case d < bestEdits:
			best, bestEdits, ties = c, d, 0
		case d == bestEdits && c != best:
			ties++
		}
	}
	if ties > 0 || bestEdits > len(name)/2 {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

/* The binomial tree over indices 0..n-1 rooted at 0, which the shm transport settles through
 * and the one-host area sets itself up through: the parent of i clears i's lowest set bit, its
 * children set one bit below it. */
#ifndef HOOP_BASE_TREE_H
#define HOOP_BASE_TREE_H

#define HOOP__TREE_MAX_KIDS 32 /* log2 of any int's range */

/* i's parent, -1 for the root. */
static inline int hoop__tree_parent(int i) { return i > 0 ? (i & (i - 1)) : -1; }

/* i's children into kids (room for HOOP__TREE_MAX_KIDS), smallest subtree first; their count. */
static inline int hoop__tree_kids(int i, int n, int *kids)
{
    int k = 0;
    for (int b = 1; b < n && (i == 0 || b < (i & -i)); b <<= 1)
        if (i + b < n) kids[k++] = i + b;
    return k;
}

/* The last index of i's subtree (i > 0): i's subtree is i .. i + lowbit(i) - 1, cut at n - 1. */
static inline int hoop__tree_last(int i, int n)
{
    int last = i + (i & -i) - 1;
    return last < n - 1 ? last : n - 1;
}

#endif

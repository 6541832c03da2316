/* Admission for the command (its seccomp supervisor): bh_admit() over
 * the decision in admit.h, which the shim compiles into its gate; and what
 * goes with it. */
#include "admission/admit.h"

int bh_admit(const struct bh_admitter *admitter, const struct bh_applicant *applicant,
             int fd, const struct bh_rule *rule, const struct sockaddr *to,
             struct bh_admitted *admitted)
{
    return bh_admit_here(admitter, applicant, fd, rule, to, admitted);
}

void bh_admission_release(const struct bh_admitter *admitter,
                          const struct bh_applicant *applicant, int shared,
                          struct bh_taken taken)
{
    bh_permit_give(admitter->ns, shared, taken, applicant->claimed);
}

void bh_admission_release_parked(const struct bh_admitter *admitter,
                                 const struct bh_applicant *applicant, int shared,
                                 bh_share share, int weight)
{
    bh_permit_give_parked(admitter->ns, shared, share, weight, applicant->claimed);
}

struct bh_membership bh_membership_of(const struct bh_config *config,
                                      struct bh_namespace *ns, int i, int shared,
                                      const struct bh_identity *identity)
{
    const struct bh_compartment *compartment = &config->compartments[i];
    struct bh_membership membership = { -1, 0 };
    for (int b = 0; b < compartment->bypass_count; b++)
        membership.bypass |= bh_who_matches(&compartment->bypasses[b], identity);
    for (int r = 0; r < compartment->reserve_count && membership.reserve < 0; r++)
        if (bh_who_matches(&compartment->reserves[r].who, identity))
            membership.reserve = (short)bh_reserve_find(ns, shared,
                                                        compartment->reserves[r].who.text);
    return membership;
}

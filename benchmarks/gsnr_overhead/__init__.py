"""What FedGSNR's statistics exchange costs against the training exchange."""
